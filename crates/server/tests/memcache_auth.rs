//! memcached authentication with `requirepass` (memcached's `-Y`): before a
//! connection authenticates with `set <any> <flags> <exptime> <bytes>` and
//! `default <password>` as data, every command, meta commands included, is
//! refused with `CLIENT_ERROR unauthenticated` and changes nothing.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use combkv_server::{Listen, Server, ServerConfig};

fn start(password: Option<&str>) -> Server {
    Server::start(ServerConfig {
        resp: Listen::At("127.0.0.1:0".parse().unwrap()),
        memcached: Listen::At("127.0.0.1:0".parse().unwrap()),
        threads: 1,
        requirepass: password.map(String::from),
        ..Default::default()
    })
    .expect("server starts")
}

struct Conn(TcpStream);

impl Conn {
    fn new(server: &Server) -> Conn {
        let s = TcpStream::connect(server.memcached_addr().unwrap()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Conn(s)
    }

    /// Sends `send`, expects exactly `expect` back.
    fn check(&mut self, send: &[u8], expect: &[u8]) {
        self.0.write_all(send).unwrap();
        let mut got = vec![0; expect.len()];
        self.0.read_exact(&mut got).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(expect),
            "request {:?}",
            String::from_utf8_lossy(send)
        );
    }
}

const UNAUTH: &[u8] = b"CLIENT_ERROR unauthenticated\r\n";

#[test]
fn nothing_runs_before_authentication() {
    let server = start(Some("s3cret"));
    // A value written by an authenticated client, to read and overwrite.
    let mut owner = Conn::new(&server);
    owner.check(b"set a 0 0 14\r\ndefault s3cret\r\n", b"STORED\r\n");
    owner.check(b"set k 5 0 5\r\nhello\r\n", b"STORED\r\n");

    let mut c = Conn::new(&server);
    c.check(b"get k\r\n", UNAUTH);
    c.check(b"gets k\r\n", UNAUTH);
    // The data block of a storage command other than the first `set` line
    // is read as lines, each refused: nothing is stored.
    c.check(b"add k 0 0 1\r\n", UNAUTH);
    c.check(b"flush_all\r\n", UNAUTH);
    c.check(b"delete k\r\n", UNAUTH);
    c.check(b"incr k 1\r\n", UNAUTH);
    c.check(b"touch k 10\r\n", UNAUTH);
    c.check(b"version\r\n", UNAUTH);
    c.check(b"stats\r\n", UNAUTH);
    c.check(b"mg k v\r\n", UNAUTH);
    c.check(b"ms k 1\r\n", UNAUTH);
    c.check(b"md k\r\n", UNAUTH);
    c.check(b"ma k\r\n", UNAUTH);
    c.check(b"me k\r\n", UNAUTH);
    c.check(b"mn\r\n", UNAUTH);
    c.check(b"quit\r\n", UNAUTH);
    // Wrong credentials.
    c.check(
        b"set k 0 0 13\r\ndefault wrong\r\n",
        b"CLIENT_ERROR authentication failure\r\n",
    );
    c.check(
        b"set k 0 0 12\r\nadmin s3cret\r\n",
        b"CLIENT_ERROR authentication failure\r\n",
    );
    c.check(
        b"set k 0 0 7\r\ndefault\r\n",
        b"CLIENT_ERROR bad authentication token format\r\n",
    );
    c.check(
        b"set k 0 0 2\r\nabcd\r\n",
        // The block is 2 bytes and "\r\n"; the rest is an (empty) line.
        b"CLIENT_ERROR bad command line termination\r\nCLIENT_ERROR unauthenticated\r\n",
    );
    c.check(b"get k\r\n", UNAUTH);
    // Nothing changed.
    owner.check(b"get k\r\n", b"VALUE k 5 5\r\nhello\r\nEND\r\n");
    // The right password: the `set` stores nothing either, it authenticates.
    c.check(b"set ignored 9 9 14\r\ndefault s3cret\r\n", b"STORED\r\n");
    c.check(b"get k ignored\r\n", b"VALUE k 5 5\r\nhello\r\nEND\r\n");
    c.check(
        b"set k 0 0 3\r\nnew\r\nmg k v\r\n",
        b"STORED\r\nVA 3\r\nnew\r\n",
    );
    c.check(b"flush_all\r\nget k\r\n", b"OK\r\nEND\r\n");
    server.shutdown();
}

#[test]
fn without_a_password_there_is_nothing_to_authenticate() {
    let server = start(None);
    let mut c = Conn::new(&server);
    c.check(
        b"set k 0 0 1\r\nv\r\nget k\r\n",
        b"STORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n",
    );
}

#[test]
fn authentication_and_commands_may_share_a_read() {
    let server = start(Some("pw"));
    let mut c = Conn::new(&server);
    c.check(
        b"get k\r\nset a 0 0 10\r\ndefault pw\r\nset k 0 0 1\r\nv\r\nget k\r\n",
        b"CLIENT_ERROR unauthenticated\r\nSTORED\r\nSTORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n",
    );
}

const NOPERM: &[u8] =
    b"CLIENT_ERROR NOPERM this user has no permissions to run this command on its keys\r\n";

/// ACL users authenticate on the memcached listener too, and their
/// requests are checked as the RESP commands that do the same thing.
#[test]
fn acl_users_and_their_permissions() {
    let server = start(Some("s3cret"));
    let mut admin = Conn::new(&server);
    admin.check(b"set a 0 0 14\r\ndefault s3cret\r\n", b"STORED\r\n");
    admin.check(b"set other 0 0 1\r\nx\r\n", b"STORED\r\n");
    // Users are made over RESP.
    let mut resp = TcpStream::connect(server.resp_addr().unwrap()).unwrap();
    resp.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    resp.write_all(b"AUTH s3cret\r\nACL SETUSER app on >pw ~app:* -@all +get +set\r\n")
        .unwrap();
    let mut got = [0u8; 10];
    resp.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"+OK\r\n+OK\r\n");

    let mut app = Conn::new(&server);
    app.check(
        b"set a 0 0 9\r\napp wrong\r\n",
        b"CLIENT_ERROR authentication failure\r\n",
    );
    app.check(b"set a 0 0 6\r\napp pw\r\n", b"STORED\r\n");
    app.check(b"set app:1 0 0 1\r\nv\r\n", b"STORED\r\n");
    app.check(b"get app:1\r\n", b"VALUE app:1 0 1\r\nv\r\nEND\r\n");
    app.check(b"get other\r\n", NOPERM);
    app.check(b"set other 0 0 1\r\ny\r\n", NOPERM);
    app.check(b"delete app:1\r\n", NOPERM);
    app.check(b"incr app:1 1\r\n", NOPERM);
    app.check(b"flush_all\r\n", NOPERM);
    app.check(b"mg app:1 v\r\n", b"VA 1\r\nv\r\n");
    app.check(b"mg other v\r\n", NOPERM);
    // Nothing denied changed anything.
    admin.check(b"get other\r\n", b"VALUE other 0 1\r\nx\r\nEND\r\n");
}
