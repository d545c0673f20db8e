//! lock-etcd against real etcd servers, one test binary (each links the gRPC stack once):
//! every primitive, bad input and bad servers, TLS, and the scenarios E01–E04.

mod election;
mod errors;
mod locking;
mod read_write;
mod scenarios;
mod semaphore;
mod tls;
