//! What a registry holds near a name that lists no members: the evidence
//! `meshline doctor` shows when a group finds no TC.
//!
//! The causes users hit are a handful (Seata issues #3314, #3432, #4935, #5349): the TC
//! registered under another cluster name, another Nacos group or namespace, another
//! application, or another service name. A backend that can list what it holds reports
//! the places that have members, each with the configuration that would select it, so
//! the fix can be printed instead of guessed.

use crate::Instance;

/// A place in the registry, near the one asked for, that has members.
#[derive(Debug, Clone, PartialEq)]
pub struct Nearby {
    /// The place in the registry's words: ``cluster `default2` `` or
    /// ``service `seata-server` in group `SEATA_GROUP`, namespace `public` ``.
    pub place: String,
    /// Its members (possibly a sample when there are very many).
    pub members: Vec<Instance>,
    /// The cluster name to map the group to (`service.vgroupMapping.<group>=<this>`),
    /// when selecting this place means another cluster; `None` when the cluster name
    /// stays and other keys change (a Nacos group).
    pub cluster: Option<String>,
    /// Other configuration that would select it, as `key=value` lines a user can paste:
    /// `registry.nacos.group=SEATA_GROUP`. Empty when the cluster name alone does.
    pub select_with: Vec<String>,
}
