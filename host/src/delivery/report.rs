//! Where a delivery outcome is told beyond what every outcome gets (a log
//! line, a counter, the swap history on `/status`: [`super::swapper`]).
//! One small interface, [`Report`], one implementation per front end:
//! [`SourceEvents`] for the flags' sources (a Warning Event on the
//! ConfigMap or object the candidate came from), the `JinghzhuPlugin`'s
//! status and Event for its driver (`resource::status::ResourceReport`),
//! and [`Quietly`] where nothing else is told. Also the Warning Event
//! writer the flags' sources share ([`warn_on`]).

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::api::Api;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};

use crate::refusal::Refusal;
use crate::runtime::LoadedPlugin;

/// The Event reason of every refused plugin.
pub const REFUSED_REASON: &str = "PluginRefused";

/// What became of a candidate the pipeline refused.
#[derive(Debug, Clone, Copy)]
pub struct RefusedCandidate<'a> {
    /// Its digest (empty: the refusal is the resource's, not a plugin's).
    pub digest: &'a str,
    /// Why.
    pub refusal: &'a Refusal,
    /// The plugin that keeps serving (`None`: nothing serves).
    pub keeping: Option<&'a str>,
}

impl RefusedCandidate<'_> {
    /// The one text every front end shows for a refusal: what was refused,
    /// by which rule, what serves meanwhile, and why.
    pub fn note(&self) -> String {
        let candidate = if self.digest.is_empty() {
            "the resource".to_string()
        } else {
            format!("plugin {}", self.digest)
        };
        let consequence = match self.keeping {
            Some(keeping) => format!("{keeping} keeps serving"),
            None => "no plugin serves until a good one arrives".to_string(),
        };
        format!(
            "{candidate} refused by rule {}, {consequence}: {}",
            self.refusal.rule, self.refusal.message
        )
    }
}

/// Tells a front end what the pipeline did with a candidate.
pub trait Report: Send {
    /// `plugin` serves now (in the role the pipeline serves).
    fn served<'a>(&'a mut self, plugin: &'a LoadedPlugin) -> BoxFuture<'a, ()>;
    /// A candidate was refused; what served keeps serving.
    fn refused<'a>(&'a mut self, refused: RefusedCandidate<'a>) -> BoxFuture<'a, ()>;
}

/// The flags' sources: a `PluginRefused` Warning Event on the ConfigMap
/// the candidate came from, or the object its source names.
pub struct SourceEvents<'a> {
    client: &'a Client,
    on: WarnOn<'a>,
}

impl<'a> SourceEvents<'a> {
    /// Warnings on the ConfigMap `configmap` when that is the source,
    /// else on `regarding`.
    pub fn new(
        client: &'a Client,
        configmap: Option<&'a (String, String)>,
        regarding: Option<&'a ObjectReference>,
    ) -> Self {
        Self {
            client,
            on: WarnOn::of(configmap, regarding),
        }
    }
}

impl Report for SourceEvents<'_> {
    fn served<'a>(&'a mut self, _plugin: &'a LoadedPlugin) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }

    fn refused<'a>(&'a mut self, refused: RefusedCandidate<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            warn_on(self.client, self.on, REFUSED_REASON, &refused.note()).await;
        })
    }
}

/// Nothing told beyond the log, the counter and `/status` (no client, or
/// no object to name).
pub struct Quietly;

impl Report for Quietly {
    fn served<'a>(&'a mut self, _plugin: &'a LoadedPlugin) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }

    fn refused<'a>(&'a mut self, _refused: RefusedCandidate<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }
}

/// The object a delivery Warning Event is recorded on.
#[derive(Debug, Clone, Copy)]
pub enum WarnOn<'a> {
    /// The source's ConfigMap, `(namespace, name)`.
    ConfigMap(&'a (String, String)),
    /// An object the source names (an OCI source's: the host's Pod, a
    /// `JinghzhuPlugin`).
    Object(&'a ObjectReference),
    /// None: the reporter records its own (a resource's driver, on the
    /// resource with its status), or there is no object to name.
    Nowhere,
}

impl<'a> WarnOn<'a> {
    /// The ConfigMap when that is the source, else `regarding`.
    pub fn of(
        configmap: Option<&'a (String, String)>,
        regarding: Option<&'a ObjectReference>,
    ) -> Self {
        match (configmap, regarding) {
            (Some(configmap), _) => Self::ConfigMap(configmap),
            (None, Some(object)) => Self::Object(object),
            (None, None) => Self::Nowhere,
        }
    }
}

/// Records a Warning Event with `reason` and `note` on `on`.
pub async fn warn_on(client: &Client, on: WarnOn<'_>, reason: &str, note: &str) {
    let regarding = match on {
        WarnOn::ConfigMap((namespace, name)) => {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
            let Ok(cm) = api.get(name).await else { return };
            cm.object_ref(&())
        }
        WarnOn::Object(object) => object.clone(),
        WarnOn::Nowhere => return,
    };
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "wasm-operator".into(),
            instance: std::env::var("POD_NAME").ok(),
        },
    );
    let event = Event {
        type_: EventType::Warning,
        reason: reason.to_string(),
        note: Some(crate::plugin_text::escape_within(
            note,
            crate::plugin_text::MAX_EVENT_NOTE,
        )),
        action: "HotSwap".into(),
        secondary: None,
    };
    if let Err(err) = recorder.publish(&event, &regarding).await {
        tracing::warn!(error = %err, reason, "could not record the Warning Event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_note_names_the_candidate_the_rule_and_what_serves() {
        let refusal = Refusal::new("plugin/load", "cannot load: not a component");
        let note = RefusedCandidate {
            digest: "sha256:ab",
            refusal: &refusal,
            keeping: Some("replicaset@0.1.0"),
        }
        .note();
        assert_eq!(
            note,
            "plugin sha256:ab refused by rule plugin/load, replicaset@0.1.0 keeps serving: \
             cannot load: not a component"
        );
        let note = RefusedCandidate {
            digest: "",
            refusal: &refusal,
            keeping: None,
        }
        .note();
        assert!(
            note.starts_with("the resource refused by rule plugin/load, no plugin serves"),
            "{note}"
        );
    }
}
