//! Runs the tokio task-per-connection variant of the server (RESP only), to
//! measure the threading model against `combkv serve`:
//!
//! `cargo run --release -p combkv-server --features tokio-variant --example tokio_variant -- --resp 127.0.0.1:6390 --threads 2`
//!
//! Takes the `combkv serve` flags it needs (`--resp ADDR`, `--threads N`,
//! `--data-dir DIR`, `--durability MODE`) and ignores the others, so
//! `scripts/server-figures --combkv-bin` can start it in place of
//! `combkv serve`. Stop it with a signal.

use combkv_server::{Listen, ServerConfig};

fn main() {
    let mut config = ServerConfig::default();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let (flag, value) = match args[i].split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (args[i].clone(), args.get(i + 1).cloned()),
        };
        let takes_value = !args[i].contains('=');
        let set = |v: Option<String>| v.unwrap_or_else(|| fail(&format!("{flag} needs a value")));
        match flag.as_str() {
            "--resp" => {
                config.resp = Listen::At(
                    set(value)
                        .parse()
                        .unwrap_or_else(|e| fail(&format!("--resp: {e}"))),
                )
            }
            "--threads" => {
                config.threads = set(value)
                    .parse()
                    .unwrap_or_else(|e| fail(&format!("--threads: {e}")))
            }
            "--data-dir" => config.data_dir = Some(set(value).into()),
            "--durability" => {
                config.durability = Some(set(value).parse().unwrap_or_else(|e: String| fail(&e)))
            }
            "--memcached" | "--log-level" | "--metrics" => {}
            _ => {
                i += 1;
                continue;
            }
        }
        i += if takes_value { 2 } else { 1 };
    }
    if let Err(e) = combkv_server::tokio_variant::serve(config) {
        fail(&e);
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("tokio_variant: {msg}");
    std::process::exit(1);
}
