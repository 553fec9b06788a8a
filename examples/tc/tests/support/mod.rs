//! Shared pieces of the fault tests that run TCs on hosts of a test network
//! (`meshline_testkit::net`).

#![allow(dead_code)] // each test binary uses its own subset

pub mod hosted_tc;
