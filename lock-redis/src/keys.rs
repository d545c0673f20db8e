//! [`RedisKeys`]: where one lock name lives in Redis.

use std::fmt::Write as _;

use lock_core::LockName;

/// The Redis keys and the pub/sub channel of one lock name.
///
/// Every key is `<prefix>:{<escaped name>}:<role>`. The braces are a Redis Cluster *hash tag*:
/// only the text between them picks the slot, so all keys of one lock (lock, fencing counter,
/// wait queue) live on one node and one script can touch them atomically.
///
/// The name is percent-encoded where it could break that layout: `%` (so the encoding is
/// injective: two different names never share a key) and `{` and `}` (so a name cannot close the
/// tag early or open a second one). Everything else is kept as is; Redis keys are binary-safe,
/// and names reach Redis only as `KEYS`/`ARGV` of a script, never spliced into script text.
///
/// ```
/// use lock_core::LockName;
/// use lock_redis::RedisKeys;
///
/// let keys = RedisKeys::new("distlock", &LockName::new("orders/{42}")?);
/// assert_eq!(keys.lock(), "distlock:{orders/%7B42%7D}:lock");
/// assert_eq!(keys.fence(), "distlock:{orders/%7B42%7D}:fence");
/// # Ok::<(), lock_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RedisKeys {
    /// The base `<prefix>:{<escaped name>}:` (for the keys of the name's read-write lock and
    /// semaphore), then the lock, fence, queue and queue-timeouts keys and the channel, each
    /// the base and its role, back to back: one allocation for all (made on every acquisition).
    text: String,
    /// Where the base and each key end in `text` (each starts where the one before ends).
    ends: [usize; 6],
}

/// The roles of a mutex's keys, in `RedisKeys::text`'s order.
const MUTEX_ROLES: [&str; 5] = ["lock", "fence", "queue", "queue-timeouts", "released"];

/// The roles of an election's keys, in the same order.
const ELECTION_ROLES: [&str; 5] =
    ["election", "election-fence", "election-queue", "election-queue-timeouts", "election-changed"];

impl RedisKeys {
    /// The keys of `name` under `prefix`.
    ///
    /// The prefix is used as given; [`RedisLockBuilder::namespace`](crate::RedisLockBuilder::namespace)
    /// rejects prefixes that would break the hash tag.
    pub fn new(prefix: &str, name: &LockName) -> Self {
        let name = name.as_str();
        let capacity =
            6 * (prefix.len() + name.len() + 4) + MUTEX_ROLES.iter().map(|role| role.len()).sum::<usize>();
        let mut text = String::with_capacity(capacity);
        text.push_str(prefix);
        text.push_str(":{");
        escape_into(&mut text, name);
        text.push_str("}:");
        Self::with_roles(text, MUTEX_ROLES)
    }

    /// `text` (a base) followed by the keys of `roles`.
    fn with_roles(mut text: String, roles: [&str; 5]) -> Self {
        let base = text.len();
        let mut ends = [base; 6];
        for (end, role) in ends[1..].iter_mut().zip(roles) {
            text.extend_from_within(..base);
            text.push_str(role);
            *end = text.len();
        }
        Self { text, ends }
    }

    /// `<prefix>:{<escaped name>}:`.
    fn base(&self) -> &str {
        &self.text[..self.ends[0]]
    }

    /// The `index`th key of `text` (0: the lock).
    fn key(&self, index: usize) -> &str {
        &self.text[self.ends[index]..self.ends[index + 1]]
    }

    /// The keys of the name's election ([`Elections`](lock_core::Elections)): a mutex's keys
    /// under roles of their own (`election`, `election-fence`, `election-queue`,
    /// `election-queue-timeouts`, channel `election-changed`), so the election never contends
    /// with the name's mutex, yet its lock is taken, waited for, extended and released as one.
    pub fn election(&self) -> Self {
        Self::with_roles(self.base().to_owned(), ELECTION_ROLES)
    }

    /// The leader record of the name's election: a hash of the leader's `owner` token, its
    /// `fence` (fencing token) and the `value` it proclaimed, written only by a win or by the
    /// holder of the election's lock, and never deleted (one small key per election name, as
    /// the fencing counter): a record whose owner does not hold the lock is a former leader's.
    pub fn leader_record(&self) -> String {
        format!("{}election-leader", self.base())
    }

    /// The keys of the name's read-write lock, in the order its scripts take them: readers (a
    /// sorted set of owner token to lease end), writer (a string holding the owner token, with
    /// the lease as TTL), waiting writers (a sorted set of owner token to the end of its place in
    /// line), fencing counter. Separate from the mutex's keys: the two never contend.
    pub fn read_write(&self) -> [String; 4] {
        ["rw-readers", "rw-writer", "rw-waiting", "rw-fence"].map(|role| format!("{}{role}", self.base()))
    }

    /// The hash of the fenced store's key of the same name ([`RedisFencedStore`](crate::RedisFencedStore)):
    /// its `fence` and `value`, in the lock's slot.
    pub fn fenced(&self) -> String {
        format!("{}fenced", self.base())
    }

    /// The data key `key` of the name, written by
    /// [`RedisBackend::set_if_held`](crate::RedisBackend::set_if_held): in the lock's slot.
    pub fn data(&self, key: &str) -> String {
        format!("{}data:{key}", self.base())
    }

    /// The pub/sub channel a release of the name's read-write lock is announced on.
    pub fn read_write_channel(&self) -> String {
        format!("{}rw-released", self.base())
    }

    /// The pub/sub channel a release of one of the name's semaphore permits is announced on.
    pub fn semaphore_channel(&self) -> String {
        format!("{}sem-released", self.base())
    }

    /// The keys of the name's semaphore, in the order its scripts take them: holders (a sorted
    /// set of owner token to lease end), count (the number of permits the holders use), fencing
    /// counter.
    pub fn semaphore(&self) -> [String; 3] {
        ["sem-holders", "sem-count", "sem-fence"].map(|role| format!("{}{role}", self.base()))
    }

    /// The lock itself: a string holding the owner token (`SetNx` kind) or a hash from owner
    /// token to hold count (`ReentrantHash` kind), with the lease as its TTL.
    pub fn lock(&self) -> &str {
        self.key(0)
    }

    /// The fencing counter: incremented by every fresh acquisition, never expired or deleted, so
    /// tokens keep increasing across holders, expiries and client restarts.
    pub fn fence(&self) -> &str {
        self.key(1)
    }

    /// The wait queue: a sorted set of waiting owner tokens in arrival order.
    pub fn queue(&self) -> &str {
        self.key(2)
    }

    /// When each queued waiter's entry lapses unless the waiter refreshes it.
    pub fn queue_timeouts(&self) -> &str {
        self.key(3)
    }

    /// The pub/sub channel a release is announced on.
    pub fn channel(&self) -> &str {
        self.key(4)
    }
}

/// Appends `name` to `text`, `%`, `{` and `}` percent-encoded.
fn escape_into(text: &mut String, name: &str) {
    for c in name.chars() {
        match c {
            '%' | '{' | '}' => {
                // Writing to a String cannot fail.
                let _ = write!(text, "%{:02X}", c as u32);
            }
            other => text.push(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(name: &str) -> RedisKeys {
        RedisKeys::new("p", &LockName::new(name).unwrap())
    }

    #[test]
    fn every_key_shares_one_hash_tag() {
        let keys = keys("a:b");
        for key in [keys.lock(), keys.fence(), keys.queue(), keys.queue_timeouts(), keys.channel()] {
            assert!(key.starts_with("p:{a:b}:"), "{key}");
        }
        for key in keys.read_write().iter().chain(&keys.semaphore()) {
            assert!(key.starts_with("p:{a:b}:") && key != keys.lock(), "{key}");
        }
    }

    #[test]
    fn the_election_has_keys_of_its_own_in_the_same_slot() {
        let keys = keys("a");
        let election = keys.election();
        let mutex = [keys.lock(), keys.fence(), keys.queue(), keys.queue_timeouts(), keys.channel()];
        let mut all: Vec<String> = mutex.iter().map(|key| (*key).to_owned()).collect();
        all.extend(keys.read_write());
        all.extend(keys.semaphore());
        all.extend([keys.read_write_channel(), keys.semaphore_channel(), keys.fenced()]);
        let own = [
            election.lock(),
            election.fence(),
            election.queue(),
            election.queue_timeouts(),
            election.channel(),
        ];
        for key in own.into_iter().chain([keys.leader_record().as_str()]) {
            assert!(key.starts_with("p:{a}:") && !all.iter().any(|other| other == key), "{key}");
        }
        assert_eq!(election.election(), election, "the election's election is itself");
    }

    #[test]
    fn braces_and_percent_are_escaped_so_the_tag_stays_intact() {
        assert_eq!(keys("{hash}tag").lock(), "p:{%7Bhash%7Dtag}:lock");
        assert_eq!(keys("}").lock(), "p:{%7D}:lock");
        assert_eq!(keys("100%").lock(), "p:{100%25}:lock");
    }

    #[test]
    fn the_mapping_is_injective_on_look_alike_names() {
        let names = ["a%7Bb", "a{b", "a%257Bb", "a%b", "a%25b", "a/b", "a_b", "a}b", "a%7Db"];
        let mut seen = std::collections::HashSet::new();
        for name in names {
            assert!(seen.insert(keys(name).lock().to_owned()), "{name} collides");
        }
    }

    #[test]
    fn unicode_is_kept() {
        assert_eq!(keys("锁/🔒").lock(), "p:{锁/🔒}:lock");
    }
}
