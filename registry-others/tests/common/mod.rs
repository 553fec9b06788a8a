//! Helpers shared by the backend tests of this crate (the watch assertions and the
//! conformance suite live in meshline-testkit, shared with the other backends).
#![allow(dead_code)]

#[allow(unused_imports)] // each test binary uses a different subset
pub use meshline_testkit::watch::{
    LogBuf, addrs, assert_unchanged_for, eventually, inst, wait_for, wait_health,
};

pub fn init_logs() {
    meshline_testkit::watch::init_logs("meshline_registry_others=info");
}
