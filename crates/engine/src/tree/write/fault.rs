//! Fault points of the write path, for tests: a test arms a named point,
//! and the next write on its thread that reaches it panics there. They let
//! the tests unwind a writer at the places a bug could (after it has taken
//! its version, before it has published its write) and check that it
//! leaves no lock and no incomplete version behind. Outside tests a point
//! is an empty inline function.

#[cfg(test)]
thread_local! {
    static ARMED: std::cell::Cell<Option<&'static str>> = const { std::cell::Cell::new(None) };
}

/// Panics here if a test armed `name` on this thread (once).
#[inline(always)]
pub(super) fn point(name: &'static str) {
    #[cfg(test)]
    ARMED.with(|armed| {
        if armed.get() == Some(name) {
            armed.set(None);
            panic!("fault point {name}");
        }
    });
    #[cfg(not(test))]
    let _ = name;
}

/// Makes the next write on this thread that reaches point `name` panic.
#[cfg(test)]
pub(crate) fn arm(name: &'static str) {
    ARMED.with(|armed| armed.set(Some(name)));
}
