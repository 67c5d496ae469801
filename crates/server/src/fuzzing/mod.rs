//! Entry points for the fuzz targets and fuzz tests (exported as
//! `combkv_server::resp_fuzzing` and `combkv_server::memcache_fuzzing`).
//! They drive a protocol's parser, or a whole connection's pipeline
//! without a socket, so they sit at the top, beside `net`.

pub mod memcache;
pub mod resp;
