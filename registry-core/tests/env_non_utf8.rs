//! The process environment may hold a variable that is not UTF-8
//! (any program can set one); reading it must not panic. Its own test binary: it
//! changes the environment of the process.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use meshline_registry_core::config::ConfigLoader;

#[test]
fn a_non_utf8_variable_in_the_process_environment_is_skipped() {
    // SAFETY: the only test of this binary; no other thread reads the environment.
    unsafe {
        std::env::set_var(OsStr::from_bytes(b"MESHLINE_ODD_\xff"), "1");
        std::env::set_var("UNRELATED_ODD", OsStr::from_bytes(b"\xfe\xff"));
        std::env::set_var("MESHLINE_REGISTRY__TYPE", "etcd3");
    }
    let cfg = ConfigLoader::new().process_env().load().unwrap();
    assert_eq!(cfg.registry.kind, "etcd3");
}
