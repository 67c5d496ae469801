//! The bookkeeping of a request's reads elsewhere (`Reading`): which
//! landed answers a request run again finds, and how long its rounds, read
//! index and timestamp are kept. The round trips themselves run in the
//! process tests (`crates/cli/tests/ranges.rs`).

use std::cell::RefCell;
use std::time::Instant;

use combkv::Error;
use combkv_replica::{At, RemoteRead};

use super::{Landing, Park, Parking, Retry, Round};
use crate::cluster::ReadScope;

/// A request's connection with no inbox (nothing is sent from here: the
/// rounds are put in place by hand).
fn parking(park: &RefCell<Park>) -> Parking<'_> {
    Parking {
        park,
        inbox: None,
        token: 1,
        client: 1,
    }
}

fn reads(key: &[u8]) -> Vec<(u64, Vec<RemoteRead>)> {
    vec![(3, vec![RemoteRead::Get(key.to_vec())])]
}

/// Sends a round by hand, as `Parking::park_round` does: the connection
/// waits, the round is listed unanswered. Its place in the list.
fn send(park: &RefCell<Park>, how: At, remote: Vec<(u64, Vec<RemoteRead>)>) -> usize {
    let mut p = park.borrow_mut();
    p.waiting = true;
    p.reading.parked = true;
    p.reading.rounds.push(Round {
        how,
        local: Vec::new(),
        remote,
        answer: None,
        taken: false,
    });
    p.reading.rounds.len() - 1
}

/// A round sent each time its need comes up again (the range map's
/// catch-up) is taken once: the next need finds nothing landed and sends
/// a new round, whose answer is then taken in its turn; a taken round is
/// not found as a read's answer either.
#[test]
fn a_taken_round_is_found_once() {
    let park = RefCell::new(Park::default());
    let p = parking(&park);
    let i = send(&park, At::Now, Vec::new());
    assert_eq!(p.take_landed(At::Now, &[], &[]), None, "not landed");
    park.borrow_mut().land(Landing::Round(i, Ok(Vec::new())));
    assert_eq!(p.take_landed(At::Now, &[], &[]), Some(Ok(Vec::new())));
    assert_eq!(p.take_landed(At::Now, &[], &[]), None, "taken");
    assert_eq!(p.landed_round(At::Now, &[], &[]), None, "taken");
    let j = send(&park, At::Now, Vec::new());
    let failed = Error::Unavailable("no leader".into());
    park.borrow_mut()
        .land(Landing::Round(j, Err(failed.clone())));
    assert_eq!(p.take_landed(At::Now, &[], &[]), Some(Err(failed)));
    assert_eq!(p.take_landed(At::Now, &[], &[]), None);
}

#[test]
fn a_landed_answer_is_found_on_every_run_and_a_failed_one_once() {
    let park = RefCell::new(Park::default());
    let p = parking(&park);
    let i = send(&park, At::Now, reads(b"a"));
    assert_eq!(
        p.landed_round(At::Now, &[], &reads(b"a")),
        None,
        "not landed"
    );
    park.borrow_mut()
        .land(Landing::Round(i, Ok(vec![vec![Vec::new()]])));
    assert!(!park.borrow().waiting);
    for run in 0..3 {
        let found = p.landed_round(At::Now, &[], &reads(b"a"));
        assert!(matches!(found, Some(Ok(_))), "run {run}: {found:?}");
    }
    // Only a round that asked exactly this.
    assert_eq!(p.landed_round(At::Now, &[], &reads(b"b")), None);
    assert_eq!(p.landed_round(At::Settle(7), &[], &reads(b"a")), None);
    // A failed round is found once: the read taken again after it sends a
    // new round rather than meet the same failure again.
    let j = send(&park, At::Now, reads(b"b"));
    let failed = Error::WrongRange("moved".into());
    park.borrow_mut()
        .land(Landing::Round(j, Err(failed.clone())));
    assert_eq!(
        p.landed_round(At::Now, &[], &reads(b"b")),
        Some(Err(failed))
    );
    assert_eq!(p.landed_round(At::Now, &[], &reads(b"b")), None);
    // A landing for no round of this request changes nothing.
    park.borrow_mut().land(Landing::Round(9, Ok(Vec::new())));
    assert_eq!(park.borrow().reading.rounds.len(), 2);
}

#[test]
fn a_request_parked_on_a_round_keeps_its_reads_until_it_answers() {
    let park = RefCell::new(Park::default());
    let p = parking(&park);
    let mark = (Instant::now(), ReadScope::none());
    p.set_read_at(42);
    let i = send(&park, At::Settle(42), reads(b"a"));
    assert!(p.take_parked(), "it parked on its round");
    assert!(!park.borrow().reading.parked, "once");
    p.keep_read(Some(mark.clone()));
    // The processing that parked it ends: the round is in flight, so its
    // read index, timestamp and rounds stay for its next run.
    park.borrow_mut().forget_read();
    assert_eq!(p.read_at(), Some(42));
    assert_eq!(park.borrow().reading.rounds.len(), 1);
    park.borrow_mut()
        .land(Landing::Round(i, Ok(vec![vec![Vec::new()]])));
    // Run again: it finds its read index and its round's answer, at the
    // same timestamp.
    assert_eq!(p.landed_read(), Some(Ok(mark)));
    assert_eq!(p.read_at(), Some(42));
    assert!(p.landed_round(At::Settle(42), &[], &reads(b"a")).is_some());
    // It answered: the next request takes a timestamp of its own.
    assert!(!p.take_parked());
    assert_eq!(p.read_at(), None);
    assert!(park.borrow().reading.rounds.is_empty());
    assert_eq!(p.landed_round(At::Settle(42), &[], &reads(b"a")), None);
}

#[test]
fn rounds_are_forgotten_once_none_is_in_flight() {
    let park = RefCell::new(Park::default());
    let p = parking(&park);
    p.set_read_at(5);
    let i = send(&park, At::Settle(5), reads(b"a"));
    park.borrow_mut()
        .land(Landing::Round(i, Ok(vec![vec![Vec::new()]])));
    // Its round landed and it did not park on another (it waited for a
    // read index instead, or answered): the processing's end forgets them,
    // and a later run starts afresh.
    p.keep_read(Some((Instant::now(), ReadScope::none())));
    park.borrow_mut().forget_read();
    assert_eq!(p.read_at(), None);
    assert_eq!(p.landed_read(), None);
    assert!(park.borrow().reading.rounds.is_empty());
}

#[test]
fn tries_are_counted_over_every_run_and_a_retry_takes_a_new_timestamp() {
    let park = RefCell::new(Park::default());
    let p = parking(&park);
    p.set_read_at(5);
    p.tried(Retry::Map);
    assert_eq!(p.read_at(), Some(5), "a map caught up keeps the timestamp");
    p.tried(Retry::Timestamp);
    assert_eq!(p.read_at(), None, "taken again at a new timestamp");
    assert_eq!((p.tries(Retry::Timestamp), p.tries(Retry::Map)), (1, 1));
    // It waits out a pause (a round that asks nothing): the processing's
    // end keeps its count; the pause's end lets it run again.
    let i = send(&park, At::Now, Vec::new());
    park.borrow_mut().forget_read();
    assert_eq!(p.tries(Retry::Timestamp), 1);
    park.borrow_mut().land(Landing::Round(i, Ok(Vec::new())));
    assert!(!park.borrow().waiting && park.borrow().reading.rounds[i].answer.is_some());
    assert_eq!(p.tries(Retry::Timestamp), 1, "counted over its runs");
    assert!(p.take_parked(), "it parked on its pause");
    assert!(!p.take_parked(), "then answered");
    assert_eq!((p.tries(Retry::Timestamp), p.tries(Retry::Map)), (0, 0));
}
