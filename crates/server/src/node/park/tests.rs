//! The bookkeeping of a request's reads elsewhere (`Reading`): which
//! landed answers a request run again finds, and how long its rounds, read
//! index and timestamp are kept. The round trips themselves run in the
//! process tests (`crates/cli/tests/ranges.rs`).

use std::cell::RefCell;
use std::time::Instant;

use combkv::Error;
use combkv_replica::{At, RemoteRead};

use super::{Answer, Landing, Park, Parking, Retry, Round};
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
    send_round(park, how, remote, false)
}

/// A catch-up of the range map sent by hand, as `Parking::park_catch_up`
/// sends it (no replica: it only has to be told apart).
fn send_catch_up(park: &RefCell<Park>) -> usize {
    send_round(park, At::Now, Vec::new(), true)
}

fn send_round(
    park: &RefCell<Park>,
    how: At,
    remote: Vec<(u64, Vec<RemoteRead>)>,
    catch_up: bool,
) -> usize {
    let mut p = park.borrow_mut();
    p.waiting = true;
    p.reading.parked = true;
    p.reading.rounds.push(Round {
        how,
        local: Vec::new(),
        remote,
        answer: Answer::Pending,
        catch_up,
    });
    p.reading.rounds.len() - 1
}

/// The range map's catch-up, sent each time the map is found behind, is
/// found once: the next time finds nothing landed and sends a new one,
/// whose answer is then found in its turn. A read's round that asked the
/// same is not taken for it, nor a catch-up for a read's answer.
#[test]
fn a_catch_up_is_found_once_and_only_as_a_catch_up() {
    let park = RefCell::new(Park::default());
    let p = parking(&park);
    let read = send(&park, At::Now, Vec::new());
    park.borrow_mut().land(Landing::Round(read, Ok(Vec::new())));
    assert_eq!(p.take_landed(), None, "a read's round");
    let i = send_catch_up(&park);
    assert_eq!(p.take_landed(), None, "not landed");
    park.borrow_mut()
        .land(Landing::Round(i, Ok(vec![vec![Vec::new()]])));
    assert_eq!(p.take_landed(), Some(Ok(vec![vec![Vec::new()]])));
    assert_eq!(p.take_landed(), None, "taken");
    // The read's own answer, not the catch-up's.
    assert_eq!(p.landed_round(At::Now, &[], &[]), Some(Ok(Vec::new())));
    let j = send_catch_up(&park);
    let failed = Error::Unavailable("no leader".into());
    park.borrow_mut()
        .land(Landing::Round(j, Err(failed.clone())));
    assert_eq!(p.take_landed(), Some(Err(failed)));
    assert_eq!(p.take_landed(), None);
    // A taken answer is not one in flight: a read index asked now
    // (`Parking::park_read`) ends this processing's rounds.
    park.borrow_mut().waiting = true;
    park.borrow_mut().forget_read();
    assert!(park.borrow().reading.rounds.is_empty());
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
    assert!(
        !park.borrow().waiting
            && matches!(park.borrow().reading.rounds[i].answer, Answer::Landed(_))
    );
    assert_eq!(p.tries(Retry::Timestamp), 1, "counted over its runs");
    assert!(p.take_parked(), "it parked on its pause");
    assert!(!p.take_parked(), "then answered");
    assert_eq!((p.tries(Retry::Timestamp), p.tries(Retry::Map)), (0, 0));
}

/// A request whose rounds landed and that then waits for a read index
/// (its keys moved to a range the one it passed did not cover) keeps its
/// tries for its next run; a processing with nothing waited for forgets
/// them.
#[test]
fn tries_survive_a_wait_for_a_read_index() {
    let park = RefCell::new(Park::default());
    let p = parking(&park);
    p.tried(Retry::Map);
    let i = send(&park, At::Now, Vec::new());
    park.borrow_mut().land(Landing::Round(i, Ok(Vec::new())));
    // A read index asked for it (`Parking::park_read`).
    park.borrow_mut().waiting = true;
    park.borrow_mut().forget_read();
    assert_eq!(p.tries(Retry::Map), 1);
    assert!(park.borrow().reading.rounds.is_empty());
    park.borrow_mut().waiting = false;
    park.borrow_mut().forget_read();
    assert_eq!(p.tries(Retry::Map), 0);
}

/// A change to the cluster that landed is found once, by its command run
/// again, also after the command parked on a read index first (and
/// forgotten by input processed without parking after it); one whose answer
/// never landed before the loop drains at shutdown is answered "may or may
/// not have been made", not asked again; one that was never asked (its
/// command waited for a read index) is asked.
#[test]
fn a_landed_change_is_found_once_and_one_cut_off_by_a_shutdown_is_not_asked_twice() {
    let mut park = Park {
        waiting: true,
        ..Park::default()
    };
    park.land(Landing::Changed(Ok(Some(7))));
    assert!(!park.waiting);
    assert!(matches!(park.change_found(true), Some(Ok(Some(7)))));
    assert!(park.change_found(true).is_none(), "found twice");

    // Its command parked on a read index first: the answer stays.
    park.land(Landing::Changed(Ok(Some(8))));
    park.waiting = true;
    park.forget_read();
    park.land(Landing::Read(Err(Error::Unavailable("no leader".into()))));
    assert!(matches!(park.change_found(true), Some(Ok(Some(8)))));

    park.land(Landing::Changed(Ok(None)));
    park.forget_read();
    assert!(park.change_found(true).is_none(), "kept past its input");

    // Parked on a read index, not on a change: the drain asks it.
    park.waiting = true;
    assert!(park.change_found(false).is_none());
    // Parked on a change, then the loop drains before the answer lands.
    park.changing = true;
    let cut_off = park.change_found(false);
    assert!(
        matches!(&cut_off, Some(Err(combkv_replica::ClusterError::Unknown(why))) if why.contains("may or may not")),
        "{cut_off:?}"
    );
    // Once it landed, its answer is found, also by the drain.
    park.changing = true;
    park.land(Landing::Changed(Ok(None)));
    assert!(!park.changing);
    assert!(matches!(park.change_found(false), Some(Ok(None))));
}
