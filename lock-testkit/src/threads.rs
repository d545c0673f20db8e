//! [`threads_named`]: counting this process's threads by name (Linux), for tests that check a
//! backend's threads end with it.

/// Threads of this process named `name`, as the kernel keeps names: their first 15 bytes. 0
/// where `/proc/self/task` cannot be read (not Linux).
pub fn threads_named(name: &str) -> usize {
    let name = &name[..name.len().min(15)];
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return 0 };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("comm")).ok())
        .filter(|comm| comm.trim_end() == name)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_a_named_thread_by_its_first_fifteen_bytes() {
        let name = "distlock-test-threads-named";
        let (started, ended) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
        std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name(name.into())
                .spawn_scoped(scope, || {
                    started.wait();
                    ended.wait();
                })
                .unwrap();
            started.wait();
            assert_eq!(threads_named(name), 1);
            ended.wait();
        });
    }
}
