//! What a paused, dead or restarted server, a wrong password, an ACL user or a script flush
//! does to a client.

use super::*;

/// A paused server (SIGSTOP) makes calls time out within the read timeout; after it resumes, the
/// client works again and no late reply is read as the answer to a later command.
#[test]
fn a_paused_server_times_out_and_leaves_no_poisoned_connection() {
    let server = RedisServer::start().expect("private server");
    let locks = RedisBackend::builder(server.url())
        .connect_timeout(SECOND)
        .io_timeout(Duration::from_millis(300))
        .max_connections(1)
        .build()
        .unwrap();
    let mut held =
        locks.try_acquire(&unique_name("pause-a"), &OwnerToken::random(), 30 * SECOND).unwrap().unwrap();

    server.process().pause().unwrap();
    let started = Instant::now();
    let outcome = locks.try_acquire(&unique_name("pause-b"), &OwnerToken::random(), 30 * SECOND);
    let took = started.elapsed();
    server.process().resume().unwrap();
    assert!(matches!(outcome, Err(Error::Timeout { .. })), "got {:?}", outcome.map(|lease| lease.is_some()));
    assert!(took < 2 * SECOND, "a paused server held the caller for {took:?}");

    // The paused acquisition's reply arrives now; a reused connection would read it as the
    // answer to the next command.
    thread::sleep(Duration::from_millis(100));
    for _ in 0..3 {
        assert!(locks.extend(&mut held, 30 * SECOND).unwrap(), "the held lease extends");
        let fresh = locks.try_acquire(&unique_name("pause-c"), &OwnerToken::random(), 30 * SECOND).unwrap();
        assert!(locks.release(fresh.expect("free")).unwrap());
    }
}

/// A killed server is a connection error at once, not a hang; after a restart the client
/// reconnects by itself (stale pooled connections are discarded).
#[test]
fn a_dead_server_is_a_connection_error_and_a_restart_is_survived() {
    let server = RedisServer::start().expect("private server");
    let locks = RedisBackend::builder(server.url()).connect_timeout(2 * SECOND).build().unwrap();
    let name = unique_name("restart");
    let lease = locks.try_acquire(&name, &OwnerToken::random(), 30 * SECOND).unwrap().unwrap();
    drop(lease);

    server.process().kill9().unwrap();
    let started = Instant::now();
    let outcome = locks.try_acquire(&unique_name("dead"), &OwnerToken::random(), 30 * SECOND);
    assert!(
        matches!(outcome, Err(Error::Connection { .. })),
        "got {:?}",
        outcome.map(|lease| lease.is_some()).map_err(|e| e.to_string())
    );
    assert!(started.elapsed() < 2 * SECOND, "took {:?}", started.elapsed());

    server.process().restart().unwrap();
    // The restart lost every key (no persistence), so the lock is free; the fencing counter
    // restarts too (the documented limit of a server without persistence).
    let lease = locks.try_acquire(&name, &OwnerToken::random(), 30 * SECOND);
    assert!(matches!(lease, Ok(Some(_))), "after the restart: {:?}", lease.map(|l| l.is_some()));
}

/// `user:password@` URLs authenticate as an ACL user; wrong credentials are
/// `Error::Authentication`, never a hang or a generic error.
#[test]
fn acl_users_and_wrong_passwords() {
    let server = RedisServer::start_with(RedisOptions::new().password("admin-secret")).expect("server");
    let mut admin = connection(&server.url());
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "locker", "on", ">locker-secret", "~*", "&*", "+@all"])
        .query(&mut admin)
        .unwrap();
    let port = server.port();
    let as_user = backend(&format!("redis://locker:locker-secret@127.0.0.1:{port}/"), RedisLockKind::SetNx);
    let name = unique_name("acl");
    let lease = as_user.try_acquire(&name, &OwnerToken::random(), 10 * SECOND).unwrap().expect("acquired");
    assert!(as_user.release(lease).unwrap());

    for url in [
        format!("redis://locker:wrong@127.0.0.1:{port}/"),
        format!("redis://:wrong@127.0.0.1:{port}/"),
        format!("redis://127.0.0.1:{port}/"),
    ] {
        let started = Instant::now();
        // `build()` opens a first connection, so wrong credentials are reported there.
        let outcome =
            RedisBackend::builder(&url).kind(RedisLockKind::SetNx).connect_timeout(2 * SECOND).build();
        assert!(
            matches!(outcome, Err(Error::Authentication { .. })),
            "{url}: got {:?}",
            outcome.map(|_| "a backend").map_err(|e| format!("{e}: {:?}", std::error::Error::source(&e)))
        );
        assert!(started.elapsed() < SECOND, "{url}: reporting took {:?}", started.elapsed());
    }
}

/// An ACL user without channel rights (Redis 7's default for new users): PUBLISH is refused, yet
/// release reports the release it did, and a waiter still gets the lock by re-checking.
#[test]
fn an_acl_user_without_channel_rights_releases_and_waiters_still_acquire() {
    let server = RedisServer::start_with(RedisOptions::new().password("admin-secret")).expect("server");
    let mut admin = connection(&server.url());
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "nochan", "on", ">nochan-secret", "~*", "resetchannels", "+@all"])
        .query(&mut admin)
        .unwrap();
    let port = server.port();
    let url = format!("redis://nochan:nochan-secret@127.0.0.1:{port}/");
    for kind in [RedisLockKind::SetNx, RedisLockKind::ReentrantHash] {
        let locks = backend(&url, kind);
        let name = unique_name("acl-nochan");
        let holder = locks.try_acquire(&name, &OwnerToken::random(), 10 * SECOND).unwrap().expect("free");
        let waiter = {
            let (locks, name) = (locks.clone(), name.clone());
            thread::spawn(move || {
                locks.acquire_until(
                    &name,
                    &OwnerToken::random(),
                    10 * SECOND,
                    Some(Instant::now() + 5 * SECOND),
                )
            })
        };
        let keys = locks.keys(&name);
        assert!(
            eventually(5 * SECOND, || admin.zcard::<_, i64>(keys.queue()).unwrap() == 1),
            "{kind:?}: the waiter queued"
        );
        let released_at = Instant::now();
        assert!(locks.release(holder).expect("release despite the refused PUBLISH"), "{kind:?}");
        let acquired = waiter.join().unwrap().unwrap().expect("the waiter got the lock");
        let took = released_at.elapsed();
        assert!(took < Duration::from_millis(1500), "{kind:?}: the waiter took {took:?} after the release");
        assert!(locks.release(acquired.lease).unwrap(), "{kind:?}");
    }
}

/// A server that forgot the scripts (restart, `SCRIPT FLUSH`) answers `NOSCRIPT`: every single
/// command loads its script and runs again, and a renewal pipeline loads its script up front.
/// (A private server: flushing the shared one could race other tests' load-and-retry.)
#[test]
fn scripts_are_reloaded_after_script_flush() {
    let server = RedisServer::start().expect("private server");
    let url = server.url();
    let mut raw = connection(&url);
    let mut flush = || {
        let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut raw).unwrap();
    };
    for kind in [RedisLockKind::SetNx, RedisLockKind::ReentrantHash] {
        let locks = backend(&url, kind);
        let name = unique_name("noscript");
        flush();
        let mut lease = locks.try_acquire(&name, &OwnerToken::random(), 10 * SECOND).unwrap().expect("free");
        flush();
        assert!(locks.extend(&mut lease, 10 * SECOND).unwrap());
        flush();
        let outcomes = locks.extend_many(&mut [Extension::new(&mut lease, 10 * SECOND)]);
        assert!(matches!(outcomes.as_slice(), [Ok(true)]), "{outcomes:?}");
        flush();
        // A timed wait that gives up leaves the queue with the dequeue script.
        let waited = locks
            .acquire_until(&name, &OwnerToken::random(), 10 * SECOND, Some(Instant::now() + SECOND / 5))
            .unwrap();
        assert!(waited.is_none());
        flush();
        assert!(locks.release(lease).unwrap());
    }
}
