//! Runs the Consul agent double standalone, so clients from other ecosystems (and the
//! `meshline` CLI) can talk to it.
//!
//! ```text
//! consul-double [--port N] [--tick-ms N] [--acl-token T]
//! ```
//!
//! Prints the bound `host:port` on stdout once it accepts connections, then serves until
//! killed.

mod double_cli;

use std::time::Duration;

use double_cli::{Args, serve_forever, started};
use meshline_testkit::{ConsulDouble, ConsulDoubleOptions};

const USAGE: &str = "usage: consul-double [--port N] [--tick-ms N] [--acl-token T]";

fn main() {
    let mut opts = ConsulDoubleOptions::default();
    let mut args = Args::new(USAGE);
    while let Some(a) = args.next_flag() {
        match a.as_str() {
            "--port" => opts.port = args.number("--port"),
            "--tick-ms" => opts.tick = Duration::from_millis(args.number("--tick-ms")),
            "--acl-token" => opts.acl_token = Some(args.value("--acl-token")),
            other => args.unknown(other),
        }
    }
    let double = started("consul-double", ConsulDouble::start(opts));
    serve_forever(double.addr());
}
