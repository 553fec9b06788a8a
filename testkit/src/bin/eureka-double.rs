//! Runs the Eureka server double standalone, so clients from other ecosystems (and the
//! `meshline` CLI) can talk to it.
//!
//! ```text
//! eureka-double [--port N] [--eviction-ms N] [--retention-ms N] [--no-delta]
//! ```
//!
//! Prints the bound `host:port` on stdout once it accepts connections (the service URL
//! is `http://host:port/eureka`), then serves until killed.

mod double_cli;

use std::time::Duration;

use double_cli::{Args, serve_forever, started};
use meshline_testkit::{EurekaDouble, EurekaDoubleOptions};

const USAGE: &str =
    "usage: eureka-double [--port N] [--eviction-ms N] [--retention-ms N] [--no-delta]";

fn main() {
    let mut opts = EurekaDoubleOptions::default();
    let mut args = Args::new(USAGE);
    while let Some(a) = args.next_flag() {
        match a.as_str() {
            "--port" => opts.port = args.number("--port"),
            "--eviction-ms" => {
                opts.eviction_interval = Duration::from_millis(args.number("--eviction-ms"))
            }
            "--retention-ms" => {
                opts.retention = Duration::from_millis(args.number("--retention-ms"))
            }
            "--no-delta" => opts.delta_enabled = false,
            other => args.unknown(other),
        }
    }
    let double = started("eureka-double", EurekaDouble::start(opts));
    serve_forever(double.addr());
}
