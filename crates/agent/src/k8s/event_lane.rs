//! The agent's events on their way to the API server: a queue, a client of their own, and a
//! budget per reason.
//!
//! Events used to be posted on the watches' client, one task each. A thousand Services with
//! a refused scheduler annotation then put that client's token bucket about 200 s in debt
//! at kube-proxy's qps 5, on every node, and a watch renewal waited behind them. Now:
//! - events go through [`EventLane`]: one task, one request at a time, on a client built
//!   for them alone (its own `--kube-api-qps` bucket), so the watches never wait for them;
//! - each reason may post [`PER_REASON`] events per [`WINDOW`]; the rest of the spell is
//!   said once, in one event on the Node naming how many were held back and a few of them;
//! - a warning's name is a hash of what it says (node, reason, object, note), so the same
//!   warning after a restart finds the one already stored (until the API server expires it,
//!   an hour by default) and is not posted again; a normal event (`Starting`) is posted at
//!   each occurrence;
//! - the queue is bounded ([`QUEUE`]); beyond it an event is dropped and logged.
//!
//! Hand-written because kube's `Recorder` posts each event at once on the client it is
//! given and keeps no budget per reason.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::PostParams;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, warn};

/// Events waiting to be posted, at most.
pub const QUEUE: usize = 1024;
/// Events of one reason posted one by one per [`WINDOW`]; the rest are summed up.
pub const PER_REASON: u32 = 10;
/// The spell over which [`PER_REASON`] counts.
pub const WINDOW: Duration = Duration::from_secs(600);
/// Names of held-back objects quoted in a summary.
const QUOTED: usize = 5;

/// Where the agent's events go; cheap to clone. Dropping every clone ends the posting task
/// once the queue is empty.
#[derive(Debug, Clone)]
pub struct EventLane {
    tx: mpsc::Sender<Event>,
}

impl EventLane {
    /// The lane and the task that posts its events with `client` (a client of their own,
    /// not the watches'), for `node`'s summaries. Run the task on the agent's tasks.
    pub fn new(
        client: kube::Client,
        node: String,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let (tx, rx) = mpsc::channel(QUEUE);
        (Self { tx }, post(client, node, rx))
    }

    /// Queues `event`: never waits. A full queue drops it, with a warning.
    pub fn record(&self, event: Event) {
        if let Err(mpsc::error::TrySendError::Full(e)) = self.tx.try_send(event) {
            warn!(
                reason = e.reason.as_deref().unwrap_or_default(),
                "the event queue is full ({QUEUE}): an event is dropped"
            );
        }
    }
}

/// One reason's spell: when it began, how many were posted, and who was held back.
#[derive(Debug)]
struct Spell {
    began: Instant,
    posted: u32,
    held: u32,
    quoted: Vec<String>,
}

impl Spell {
    fn new(now: Instant) -> Self {
        Self {
            began: now,
            posted: 0,
            held: 0,
            quoted: Vec::new(),
        }
    }
}

/// What the budget says of one event.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Post,
    Hold,
}

/// The budget of every reason: pure, so that it is tested without a server.
#[derive(Debug, Default)]
struct Budget {
    spells: HashMap<String, Spell>,
}

impl Budget {
    /// Whether an event of `reason` about `object` is posted at `now`.
    fn admit(&mut self, reason: &str, object: &str, now: Instant) -> Verdict {
        let spell = self
            .spells
            .entry(reason.to_owned())
            .or_insert_with(|| Spell::new(now));
        if spell.posted < PER_REASON {
            spell.posted += 1;
            return Verdict::Post;
        }
        spell.held += 1;
        if spell.quoted.len() < QUOTED {
            spell.quoted.push(object.to_owned());
        }
        Verdict::Hold
    }

    /// The spells that have lasted [`WINDOW`] by `now`, taken out: each reason with how many
    /// were held back (zero for a spell that held none) and a few of them.
    fn ended(&mut self, now: Instant) -> Vec<(String, u32, Vec<String>)> {
        let ended: Vec<String> = self
            .spells
            .iter()
            .filter(|(_, s)| now.duration_since(s.began) >= WINDOW)
            .map(|(r, _)| r.clone())
            .collect();
        ended
            .into_iter()
            .filter_map(|r| self.spells.remove(&r).map(|s| (r, s.held, s.quoted)))
            .collect()
    }
}

/// The posting task: one event at a time, the budget checked first, summaries at each
/// spell's end.
async fn post(client: kube::Client, node: String, mut rx: mpsc::Receiver<Event>) {
    let mut budget = Budget::default();
    let mut tick = tokio::time::interval(WINDOW / 10);
    loop {
        tokio::select! {
            event = rx.recv() => {
                let Some(event) = event else { return };
                let reason = event.reason.clone().unwrap_or_default();
                let object = regarding(&event);
                if budget.admit(&reason, &object, Instant::now()) == Verdict::Post {
                    send(&client, event).await;
                }
            }
            _ = tick.tick() => {
                for (reason, held, quoted) in budget.ended(Instant::now()) {
                    if held > 0 {
                        send(&client, summary(&node, &reason, held, &quoted)).await;
                    }
                }
            }
        }
    }
}

/// `namespace/name` of what `event` is about.
fn regarding(event: &Event) -> String {
    let r = event.regarding.as_ref();
    let part = |f: Option<&String>| f.cloned().unwrap_or_default();
    match r.and_then(|r| r.namespace.as_ref()) {
        Some(ns) => format!("{ns}/{}", part(r.and_then(|r| r.name.as_ref()))),
        None => part(r.and_then(|r| r.name.as_ref())),
    }
}

/// The one event that says what a spell held back, on the Node.
fn summary(node: &str, reason: &str, held: u32, quoted: &[String]) -> Event {
    super::events::node_event(
        node,
        ("Warning", reason, "Summarize"),
        format!(
            "node {node}: {held} more {reason} events in the last {} min were not recorded one by one (at most {PER_REASON} per reason); among them {}; the agent's log has each",
            WINDOW.as_secs() / 60,
            quoted.join(", ")
        ),
    )
}

/// Posts `event`, a warning under a name derived from what it says. When that name is stored
/// already (the same warning, from before a restart or earlier in this run) it is not posted
/// again.
/// Counting it into the stored event's `series` would need `get` and `patch` on events, which
/// the agent's RBAC leaves out (it may only create). Failures are logged: events are best
/// effort.
async fn send(client: &kube::Client, mut event: Event) {
    let namespace = event.metadata.namespace.clone().unwrap_or_default();
    let reason = event.reason.clone().unwrap_or_default();
    // A warning says a condition, which a restart finds again: one event while it is stored.
    // A normal event says an occurrence (`Starting`): each gets its own, as client-go names it.
    if event.type_.as_deref() == Some("Warning") {
        event.metadata.name = Some(stable_name(&event));
    }
    let name = event.metadata.name.clone().unwrap_or_default();
    let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
    match api.create(&PostParams::default(), &event).await {
        Ok(_) => debug!(reason, name, "recorded an event"),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            debug!(reason, name, "the same event is stored already");
        }
        Err(e) => warn!(reason, error = %e, "cannot record an event"),
    }
}

/// The regarded object's name, a dot, and a hash of the node, reason, object and note
/// (FNV-1a: stable across builds, unlike std's hasher): the same event gets the same name.
fn stable_name(event: &Event) -> String {
    let object = event
        .regarding
        .as_ref()
        .and_then(|r| r.name.clone())
        .unwrap_or_default();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in [
        event.reporting_instance.as_deref().unwrap_or_default(),
        event.reason.as_deref().unwrap_or_default(),
        &regarding(event),
        event.note.as_deref().unwrap_or_default(),
    ] {
        for b in part.bytes().chain([0]) {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    // A name is at most 253 characters.
    let object: String = object.chars().take(253 - 17).collect();
    format!("{object}.{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::events::{node_starting, scheduler_refused};
    use crate::model::desired::scheduler::{Refusal, Why};
    use crate::model::snapshot::cluster::ServiceRef;

    fn refusal(name: &str) -> Refusal {
        Refusal {
            service: ServiceRef::new("shop", name),
            asked: "lblc".into(),
            instead: "rr".into(),
            why: Why::LoadsUnderLock,
        }
    }

    #[test]
    fn a_reason_posts_its_budget_then_holds_the_rest_until_the_spell_ends() {
        let mut b = Budget::default();
        let t0 = Instant::now();
        for i in 0..PER_REASON {
            assert_eq!(
                b.admit("SchedulerRefused", &format!("s{i}"), t0),
                Verdict::Post
            );
        }
        for i in 0..990 {
            assert_eq!(
                b.admit("SchedulerRefused", &format!("h{i}"), t0),
                Verdict::Hold
            );
        }
        // Another reason has a budget of its own.
        assert_eq!(
            b.admit("FailedToStartServiceHealthcheck", "x", t0),
            Verdict::Post
        );
        assert!(b.ended(t0 + WINDOW / 2).is_empty());
        let mut ended = b.ended(t0 + WINDOW);
        ended.sort();
        assert_eq!(ended.len(), 2);
        let (reason, held, quoted) = &ended[1];
        assert_eq!((reason.as_str(), *held), ("SchedulerRefused", 990));
        assert_eq!(quoted, &["h0", "h1", "h2", "h3", "h4"]);
        assert_eq!(ended[0].1, 0);
        // A new spell, a new budget.
        assert_eq!(b.admit("SchedulerRefused", "s", t0 + WINDOW), Verdict::Post);
    }

    #[test]
    fn the_same_event_gets_the_same_name_and_another_event_another() {
        let a = scheduler_refused("node-a", &refusal("cart"));
        let again = scheduler_refused("node-a", &refusal("cart"));
        assert_ne!(
            a.metadata.name, again.metadata.name,
            "client-go's names differ by time"
        );
        assert_eq!(stable_name(&a), stable_name(&again));
        assert!(stable_name(&a).starts_with("cart."));
        for other in [
            scheduler_refused("node-b", &refusal("cart")),
            scheduler_refused("node-a", &refusal("till")),
            node_starting("node-a"),
        ] {
            assert_ne!(stable_name(&a), stable_name(&other));
        }
        let long = scheduler_refused("node-a", &refusal(&"x".repeat(253)));
        assert_eq!(stable_name(&long).len(), 253);
    }

    #[test]
    fn a_summary_names_the_node_the_count_and_a_few_objects() {
        let e = summary(
            "node-a",
            "SchedulerRefused",
            990,
            &["shop/a".into(), "shop/b".into()],
        );
        let r = e.regarding.clone().unwrap();
        assert_eq!(
            (r.kind.as_deref(), r.name.as_deref()),
            (Some("Node"), Some("node-a"))
        );
        let note = e.note.unwrap();
        assert!(note.contains("990 more SchedulerRefused events"), "{note}");
        assert!(note.contains("shop/a, shop/b"), "{note}");
        assert!(note.len() <= 1024);
    }
}
