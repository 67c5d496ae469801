//! Raw-bytes tests of the RESP listener: exact request bytes in, exact reply
//! bytes out, for every command in the table, its happy path and its error
//! paths (issue 6, "What it must show" 1). Each test starts its own server
//! on a free port.

mod acl;
mod atomic;
mod command_docs;
mod config_set;
mod help;
mod keys;
mod large;
mod limits;
mod multi;
mod ordered;
// `DEBUG PANIC` exists in debug builds only.
#[cfg(debug_assertions)]
mod panic;
mod peer;
mod protocol;
mod server;
mod strict;
mod strings;
mod strings2;
mod wait;
mod wire;
