//! Free ports for the servers under test, and `scripts/peers install`:
//! concurrent callers take turns instead of failing on the package
//! manager's lock.

use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use combkv_bench::net::server::{PORT_RANGE, free_port, free_port_in};

/// A port that a listener holds for the duration of the test, and whose
/// successor is free (checked by binding it). Both come from [`PORT_RANGE`],
/// below the kernel's ephemeral range: a port the kernel handed out (port 0)
/// has neighbours that any outgoing connection on the machine may take
/// meanwhile, which failed this test once in CI while apt-get downloaded.
/// Held by each test that binds ports of [`PORT_RANGE`]: the tests of
/// this binary run side by side, and one binding a port for a moment took
/// the successor another had just found free (CI lost a run to it).
static PORTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn held_port_with_free_successor() -> (TcpListener, u16) {
    loop {
        let p = free_port().unwrap();
        if p == *PORT_RANGE.end() {
            continue;
        }
        let Ok(l) = TcpListener::bind(("127.0.0.1", p)) else {
            continue;
        };
        if TcpListener::bind(("127.0.0.1", p + 1)).is_ok() {
            return (l, p);
        }
    }
}

#[test]
fn free_port_skips_a_listening_port() {
    let _ports = PORTS.lock().unwrap_or_else(|e| e.into_inner());
    // The held port is never the answer. Its successor may be taken by
    // another program's connection meanwhile (CI lost a run to that):
    // then the range has no free port, and another pair is tried.
    let mut answered = 0;
    for _ in 0..5 {
        let (_held, p) = held_port_with_free_successor();
        assert!(
            free_port_in(p..=p).is_err(),
            "the only port in the range is taken"
        );
        for _ in 0..20 {
            match free_port_in(p..=p + 1) {
                Ok(q) => {
                    assert_eq!(q, p + 1, "port {p} is listening");
                    answered += 1;
                }
                Err(_) => break,
            }
        }
        if answered > 0 {
            return;
        }
    }
    panic!("the successor of a held port was taken five times over");
}

#[test]
fn free_port_is_bindable_and_in_the_default_range() {
    let _ports = PORTS.lock().unwrap_or_else(|e| e.into_inner());
    // Between the probe and this bind another program may take the port
    // (CI lost a run to it once): most, not all, must bind. A probe that
    // answered taken ports would fail nearly every one.
    let mut taken = Vec::new();
    for _ in 0..20 {
        let p = free_port().unwrap();
        assert!(PORT_RANGE.contains(&p), "{p}");
        if let Err(e) = TcpListener::bind(("127.0.0.1", p)) {
            taken.push(format!("port {p}: {e}"));
        }
    }
    assert!(taken.len() <= 2, "{taken:?}");
}

#[test]
#[expect(
    clippy::reversed_empty_ranges,
    reason = "a bad range is the input under test"
)]
fn free_port_refuses_bad_ranges() {
    assert!(free_port_in(9..=8).is_err());
    assert!(free_port_in(0..=10).is_err());
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/peers")
}

/// A stand-in for apt-get that fails as the real one does when another
/// instance holds its lock, takes a while, and "installs" a package by
/// putting an empty program of the package's commands into `bin`.
const FAKE_APT_GET: &str = r#"#!/bin/bash
state="$FAKE_APT_STATE"
if ! ( set -o noclobber; echo $$ > "$state/running" ) 2>/dev/null; then
    echo "E: Could not get lock /var/lib/dpkg/lock-frontend" >&2
    exit 100
fi
sleep 0.3
verb=
for a in "$@"; do
    case "$a" in
        update|install) verb=$a ;;
        redis-server) progs="redis-server" ;;
        redis-tools) progs="redis-cli redis-benchmark" ;;
        memcached) progs="memcached" ;;
        *) progs= ;;
    esac
    for p in $progs; do
        printf '#!/bin/sh\n' > "$state/bin/$p"
        chmod +x "$state/bin/$p"
    done
done
echo "$verb" >> "$state/calls"
rm "$state/running"
"#;

/// A directory holding the fake apt-get, an empty `bin` for what it
/// installs, and links to the few real tools the script needs, so that the
/// machine's own redis-server or memcached are not on the script's PATH.
fn sandbox(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("combkv-peers-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for sub in ["bin", "tools"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    for tool in [
        "bash", "sh", "env", "id", "flock", "sleep", "rm", "chmod", "cat",
    ] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .unwrap();
        let path = String::from_utf8(found.stdout).unwrap();
        assert!(found.status.success(), "{tool} is needed for this test");
        std::os::unix::fs::symlink(path.trim(), dir.join("tools").join(tool)).unwrap();
    }
    let apt = dir.join("fake-apt-get");
    std::fs::write(&apt, FAKE_APT_GET).unwrap();
    std::fs::set_permissions(&apt, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

fn peers_in(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(dir.join("tools/bash"));
    c.arg(script())
        .args(args)
        .env_clear()
        .env(
            "PATH",
            format!(
                "{}:{}",
                dir.join("bin").display(),
                dir.join("tools").display()
            ),
        )
        .env("COMBKV_PEERS_APT_GET", dir.join("fake-apt-get"))
        .env("COMBKV_PEERS_LOCK", dir.join("lock"))
        .env("FAKE_APT_STATE", dir);
    c
}

fn calls(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("calls"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn describe(o: &Output) -> String {
    format!(
        "{}: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr).trim_end()
    )
}

#[test]
fn concurrent_installs_wait_for_each_other() {
    let dir = sandbox("concurrent");
    let runs: Vec<_> = (0..3)
        .map(|_| {
            peers_in(&dir, &["install", "redis", "memcached"])
                .spawn()
                .unwrap()
        })
        .collect();
    for r in runs {
        let o = r.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", describe(&o));
    }
    // The first caller installed; the others found it done under the lock.
    assert_eq!(calls(&dir), ["update", "install"]);
    let check = peers_in(&dir, &["check", "redis", "memcached"])
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", describe(&check));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn check_names_what_is_missing_and_install_skips_what_is_there() {
    let dir = sandbox("check");
    let o = peers_in(&dir, &["check", "memcached"]).output().unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("missing: memcached"),
        "{}",
        describe(&o)
    );
    let o = peers_in(&dir, &["install", "memcached"]).output().unwrap();
    assert!(o.status.success(), "{}", describe(&o));
    let o = peers_in(&dir, &["install", "memcached"]).output().unwrap();
    assert!(o.status.success(), "{}", describe(&o));
    assert_eq!(calls(&dir), ["update", "install"], "installed once");
    let o = peers_in(&dir, &["install", "mongodb"]).output().unwrap();
    assert!(!o.status.success(), "an unknown peer is an error");
    std::fs::remove_dir_all(&dir).unwrap();
}
