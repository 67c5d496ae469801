"""redis-py against a running combkv (run by crates/server/tests/redis_py.rs).

Usage: python transactions.py PORT

Application code as redis-py users write it: pipeline() (MULTI/EXEC by
default), the WATCH retry loop of redis-py's documentation under eight
concurrent incrementers, transaction() with a callback, and the string
commands added for clients like these. Any failed check raises, and the
process exits non-zero with the traceback.
"""

import sys
import threading

import redis


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def pipelines(r):
    r.flushall()
    # pipeline() wraps the commands in MULTI ... EXEC.
    with r.pipeline() as p:
        p.set("a", "1").incr("a").get("a").mget("a", "missing").exists("a", "missing")
        out = p.execute()
    check(out == [True, 2, b"2", [b"2", None], 1], f"transaction pipeline: {out}")
    # A command's own error is raised by execute(); the rest applied.
    with r.pipeline() as p:
        p.set("text", "abc").incr("text").set("after", "yes")
        try:
            p.execute()
            raise AssertionError("INCR of a non-number inside EXEC did not fail")
        except redis.ResponseError as e:
            check("not an integer" in str(e), f"error text: {e}")
    check(r.get("after") == b"yes", "the commands after a failed one did not apply")
    # A queuing error (wrong arity) discards the whole transaction.
    with r.pipeline() as p:
        p.set("discarded", "1")
        p.execute_command("SET", "only-key")
        try:
            p.execute()
            raise AssertionError("a queuing error did not abort EXEC")
        except redis.ResponseError as e:
            check("EXECABORT" in str(e) or "wrong number" in str(e), f"error text: {e}")
    check(r.get("discarded") is None, "an aborted transaction applied a command")
    # Without transaction=False, no MULTI: plain pipelining still works.
    with r.pipeline(transaction=False) as p:
        out = p.set("x", "1").get("x").execute()
    check(out == [True, b"1"], f"plain pipeline: {out}")


def watch_retry_loop(port, clients=8, each=100):
    """redis-py's documented optimistic-locking loop."""
    r = redis.Redis(port=port)
    r.delete("counter")
    errors = []
    aborted = [0]
    lock = threading.Lock()

    def work():
        try:
            c = redis.Redis(port=port)
            for _ in range(each):
                with c.pipeline() as pipe:
                    while True:
                        try:
                            pipe.watch("counter")
                            n = int(pipe.get("counter") or 0)
                            pipe.multi()
                            pipe.set("counter", n + 1)
                            pipe.execute()
                            break
                        except redis.WatchError:
                            with lock:
                                aborted[0] += 1
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    total = int(r.get("counter"))
    check(total == clients * each, f"counter is {total}, not {clients * each}")
    check(aborted[0] > 0, "no EXEC was aborted: the clients did not race")
    print(f"watch loop: {clients} clients x {each}, {aborted[0]} retries")


def transaction_helper(r):
    r.set("balance:a", 100)
    r.set("balance:b", 0)

    def move(pipe):
        a = int(pipe.get("balance:a"))
        pipe.multi()
        pipe.set("balance:a", a - 30)
        pipe.incrby("balance:b", 30)

    out = r.transaction(move, "balance:a", "balance:b")
    check(out == [True, 30], f"transaction(): {out}")
    check(r.get("balance:a") == b"70", "transaction() did not apply")


def string_commands(r):
    check(r.setex("sx", 100, "v") is True, "setex")
    check(90 <= r.ttl("sx") <= 100, "setex's ttl")
    check(r.psetex("px", 100000, "w") is True, "psetex")
    check(90000 <= r.pttl("px") <= 100000, "psetex's pttl")
    check(r.getset("px", "new") == b"w", "getset's old value")
    check(r.ttl("px") == -1, "getset clears the ttl")
    try:
        r.setex("sx", 0, "v")
        raise AssertionError("SETEX 0 was accepted")
    except redis.ResponseError as e:
        check("invalid expire time" in str(e), f"setex error: {e}")
    r.set("g", "Hello")
    check(r.getex("g", ex=50) == b"Hello" and 40 <= r.ttl("g") <= 50, "getex ex")
    check(r.getex("g", persist=True) == b"Hello" and r.ttl("g") == -1, "getex persist")
    check(r.getrange("g", 1, 3) == b"ell" and r.substr("g", -3, -1) == b"llo", "getrange")
    check(r.msetnx({"n1": 1, "n2": 2}) is True, "msetnx all new")
    check(r.msetnx({"n2": 9, "n3": 3}) is False and r.get("n3") is None, "msetnx none")
    check(r.touch("n1", "n2", "nokey") == 2, "touch")
    r.expireat("n1", 33177600000)
    check(r.expiretime("n1") == 33177600000, "expiretime")
    check(r.pexpiretime("n2") == -1, "pexpiretime")
    check(r.rename("n1", "renamed") is True and r.get("renamed") == b"1", "rename")
    check(r.renamenx("renamed", "n2") is False, "renamenx")
    check(r.copy("n2", "copied") is True and r.get("copied") == b"2", "copy")
    check(r.copy("n2", "copied") is False and r.copy("n2", "copied", replace=True), "copy replace")
    check(r.setrange("sr", 2, "ab") == 4 and r.get("sr") == b"\x00\x00ab", "setrange")
    check(r.setbit("bits", 7, 1) == 0 and r.getbit("bits", 7) == 1, "setbit/getbit")
    r.set("foobar", "foobar")
    check(r.bitcount("foobar") == 26 and r.bitcount("foobar", 1, 1) == 6, "bitcount")
    r.set("mykey", b"\x00\xff\xf0")
    check(r.bitpos("mykey", 1) == 8 and r.bitpos("mykey", 1, 2) == 16, "bitpos")
    check(r.bitpos("mykey", 1, 7, 15, mode="BIT") == 8, "bitpos bit range")
    r.set("fl", "10.50")
    check(r.incrbyfloat("fl", 0.1) == 10.6 and r.get("fl") == b"10.6", "incrbyfloat")
    check(r.incrbyfloat("fl", -5) == 5.6, "incrbyfloat negative")
    r.mset({"key1": "ohmytext", "key2": "mynewtext"})
    check(r.lcs("key1", "key2") == b"mytext", "lcs")
    check(r.lcs("key1", "key2", len=True) == 6, "lcs len")
    idx = r.lcs("key1", "key2", idx=True, minmatchlen=4, withmatchlen=True)
    check(idx == [b"matches", [[[4, 7], [5, 8], 4]], b"len", 6], f"lcs idx {idx!r}")


def main():
    port = int(sys.argv[1])
    r = redis.Redis(port=port)
    check(r.ping(), "ping")
    pipelines(r)
    transaction_helper(r)
    string_commands(r)
    watch_retry_loop(port)
    print("redis-py: all checks passed")


if __name__ == "__main__":
    main()
