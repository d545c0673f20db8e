//! One node's view of a Redis Cluster, read from `CLUSTER NODES`.

use std::ops::RangeInclusive;

/// How many hash slots a Redis Cluster has.
pub(crate) const SLOTS: u16 = 16384;

/// A primary of a [`RedisCluster`](super::RedisCluster), as the node that was asked sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClusterPrimary {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Its node id (40 hex digits), as `CLUSTER SETSLOT … NODE` takes it.
    pub id: String,
    /// The slots it serves, as inclusive ranges in ascending order.
    pub slots: Vec<RangeInclusive<u16>>,
    /// The ports of its replicas, ascending, without those the asked node counts as failing
    /// (`fail` or `fail?`).
    pub replicas: Vec<u16>,
}

impl ClusterPrimary {
    /// Whether it serves `slot`.
    pub fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|range| range.contains(&slot))
    }

    /// How many slots it serves.
    pub fn slot_count(&self) -> usize {
        self.slots.iter().map(|range| usize::from(range.end() - range.start()) + 1).sum()
    }
}

/// One line of `CLUSTER NODES`: `<id> <ip:port@cport[,hostname]> <flags> <primary|-> <ping-sent>
/// <pong-recv> <config-epoch> <link-state> <slot>…`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    id: String,
    port: u16,
    flags: Vec<String>,
    primary_id: Option<String>,
    /// Served slots; open migrations (`[slot->-id]`, `[slot-<-id]`) are left out.
    slots: Vec<RangeInclusive<u16>>,
}

impl Entry {
    fn parse(line: &str) -> Result<Self, String> {
        let bad = || format!("unexpected CLUSTER NODES line {line:?}");
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [id, address, flags, primary, _ping, _pong, _epoch, _link, slots @ ..] = fields.as_slice() else {
            return Err(bad());
        };
        let host_port = address.split(['@', ',']).next().unwrap_or_default();
        let port = host_port.rsplit(':').next().and_then(|port| port.parse().ok()).ok_or_else(bad)?;
        let slots = slots
            .iter()
            .filter(|slot| !slot.starts_with('['))
            .map(|slot| {
                let (start, end) = slot.split_once('-').unwrap_or((slot, slot));
                Ok(start.parse().map_err(|_| bad())?..=end.parse().map_err(|_| bad())?)
            })
            .collect::<Result<_, String>>()?;
        Ok(Entry {
            id: (*id).to_owned(),
            port,
            flags: flags.split(',').map(str::to_owned).collect(),
            primary_id: (*primary != "-").then(|| (*primary).to_owned()),
            slots,
        })
    }

    fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|own| own == flag)
    }

    fn is_failing(&self) -> bool {
        self.has_flag("fail") || self.has_flag("fail?")
    }
}

/// What one node says about every node of its cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Topology {
    entries: Vec<Entry>,
}

impl Topology {
    /// Parses a `CLUSTER NODES` reply.
    pub fn parse(text: &str) -> Result<Self, String> {
        let entries = text
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(Entry::parse)
            .collect::<Result<_, _>>()?;
        Ok(Topology { entries })
    }

    /// The primaries that serve slots, by their first slot.
    pub fn primaries(&self) -> Vec<ClusterPrimary> {
        let mut primaries: Vec<ClusterPrimary> = self
            .entries
            .iter()
            .filter(|entry| entry.has_flag("master") && !entry.slots.is_empty())
            .map(|primary| {
                let mut replicas: Vec<u16> = self
                    .entries
                    .iter()
                    .filter(|entry| entry.primary_id.as_ref() == Some(&primary.id))
                    .filter(|entry| !entry.is_failing())
                    .map(|entry| entry.port)
                    .collect();
                replicas.sort_unstable();
                ClusterPrimary {
                    port: primary.port,
                    id: primary.id.clone(),
                    slots: primary.slots.clone(),
                    replicas,
                }
            })
            .collect();
        primaries.sort_by_key(|primary| primary.slots.first().map(|range| *range.start()));
        primaries
    }

    /// Which port serves each slot range, by range; the same on nodes that agree.
    pub fn slot_owners(&self) -> Vec<(RangeInclusive<u16>, u16)> {
        let mut owners: Vec<_> = self
            .entries
            .iter()
            .filter(|entry| entry.has_flag("master"))
            .flat_map(|entry| entry.slots.iter().map(|range| (range.clone(), entry.port)))
            .collect();
        owners.sort_by_key(|(range, _)| *range.start());
        owners
    }

    /// The port of the primary that serves `slot`.
    pub fn owner(&self, slot: u16) -> Option<u16> {
        self.slot_owners().into_iter().find(|(range, _)| range.contains(&slot)).map(|(_, port)| port)
    }

    /// How many slots no primary serves.
    pub fn unserved_slots(&self) -> usize {
        let served: usize =
            self.slot_owners().iter().map(|(range, _)| usize::from(range.end() - range.start()) + 1).sum();
        usize::from(SLOTS).saturating_sub(served)
    }

    /// The ports of the nodes this node counts as failing (`fail` or `fail?`).
    pub fn failing(&self) -> Vec<u16> {
        self.entries.iter().filter(|entry| entry.is_failing()).map(|entry| entry.port).collect()
    }

    /// The id of the node on `port`, if it is a primary (with or without slots).
    pub fn primary_id(&self, port: u16) -> Option<&str> {
        self.entries
            .iter()
            .find(|entry| entry.port == port && entry.has_flag("master"))
            .map(|entry| entry.id.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What Redis 7.0 answered during a migration of slot 12182, after a failover.
    const NODES: &str = "\
fad6 127.0.0.1:17005@27005 slave 98f1 0 1795619955021 3 connected
3e0b 127.0.0.1:17001@27001 master,fail - 1795619955000 1795619954000 1 disconnected
8df6 127.0.0.1:17006@27006 myself,master - 0 1795619955000 7 connected 0-5460
c9c4 127.0.0.1:17002@27002,host.example master - 0 1795619955021 2 connected 5461-10922
98f1 127.0.0.1:17003@27003 master - 0 1795619955424 3 connected 10923-12181 12182 12183-16383 [12182->-8df6]
a92e 127.0.0.1:17004@27004 slave c9c4 0 1795619955223 2 connected
dead 127.0.0.1:17007@27007 slave,fail 8df6 0 1795619955223 2 connected
";

    #[test]
    fn reads_primaries_replicas_and_slots() {
        let topology = Topology::parse(NODES).unwrap();
        let primaries = topology.primaries();
        let ports: Vec<u16> = primaries.iter().map(|primary| primary.port).collect();
        assert_eq!(ports, [17006, 17002, 17003]);
        assert_eq!(primaries[0].replicas, Vec::<u16>::new(), "failed replicas are left out");
        assert_eq!(primaries[1].replicas, [17004]);
        assert_eq!(primaries[2].slots, [10923..=12181, 12182..=12182, 12183..=16383]);
        assert_eq!(primaries[2].slot_count(), 5461);
        assert!(primaries[2].serves(12182) && !primaries[2].serves(0));
        assert_eq!(topology.owner(12182), Some(17003));
        assert_eq!(topology.owner(0), Some(17006));
        assert_eq!(topology.unserved_slots(), 0);
        assert_eq!(topology.primary_id(17001), Some("3e0b"), "a failed primary is still a primary");
        assert_eq!(topology.primary_id(17004), None);
        assert_eq!(topology.failing(), [17001, 17007]);
    }

    #[test]
    fn rejects_what_is_not_cluster_nodes() {
        assert!(Topology::parse("ERR This instance has cluster support disabled").is_err());
        assert!(Topology::parse("a 127.0.0.1:x@1 master - 0 0 1 connected").is_err());
    }
}
