//! # meshline-bench-support
//!
//! What the benches and the gRPC peers of meshline's examples and tests share, apart
//! from meshline itself: with feature `grpc`, the hand-written tonic services of the
//! programs, benches and tests that serve gRPC without protoc (module `grpc`); with
//! feature `bench`, what the bench programs measure with (module `bench`).
//!
//! It depends on no meshline crate, so the rpc-client's benches and tests can use it
//! (as a dev-dependency) without a dependency loop; what the example programs share
//! that needs meshline is in `meshline-example-support`.

#![warn(missing_docs)]

#[cfg(feature = "bench")]
pub mod bench;
#[cfg(feature = "grpc")]
pub mod grpc;
