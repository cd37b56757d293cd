//! The `Jinghzhu` builder.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use wasm_operator_model::crd::{Jinghzhu, JinghzhuSpec, JinghzhuStatus};

use crate::{at_second, string_map};

/// A `Jinghzhu` named `name`: `desired` 0, no template, no namespace, no
/// uid, no status until told.
pub fn jinghzhu(name: &str) -> JinghzhuBuilder {
    JinghzhuBuilder(Jinghzhu::new(name, JinghzhuSpec::default()))
}

/// Builds a `Jinghzhu` (see [`jinghzhu`]).
#[derive(Clone, Debug)]
#[must_use]
pub struct JinghzhuBuilder(Jinghzhu);

impl JinghzhuBuilder {
    fn meta(mut self, set: impl FnOnce(&mut ObjectMeta)) -> Self {
        set(&mut self.0.metadata);
        self
    }

    pub fn namespace(self, namespace: &str) -> Self {
        self.meta(|m| m.namespace = Some(namespace.into()))
    }

    pub fn uid(self, uid: &str) -> Self {
        self.meta(|m| m.uid = Some(uid.into()))
    }

    pub fn generation(self, generation: i64) -> Self {
        self.meta(|m| m.generation = Some(generation))
    }

    pub fn resource_version(self, version: &str) -> Self {
        self.meta(|m| m.resource_version = Some(version.into()))
    }

    /// Created `secs` seconds after the epoch.
    pub fn created_at(self, secs: i64) -> Self {
        self.meta(|m| m.creation_timestamp = Some(at_second(secs)))
    }

    /// Adds these labels (an empty list still sets an empty map).
    pub fn labels(self, labels: &[(&str, &str)]) -> Self {
        self.meta(|m| m.labels.get_or_insert_default().extend(string_map(labels)))
    }

    /// Adds these annotations (an empty list still sets an empty map).
    pub fn annotations(self, annotations: &[(&str, &str)]) -> Self {
        self.meta(|m| {
            m.annotations
                .get_or_insert_default()
                .extend(string_map(annotations))
        })
    }

    pub fn desired(mut self, desired: u32) -> Self {
        self.0.spec.desired = desired;
        self
    }

    pub fn template(mut self, template: PodTemplateSpec) -> Self {
        self.0.spec.template = Some(Box::new(template));
        self
    }

    /// The template from its JSON (`{"metadata": …, "spec": …}`).
    ///
    /// # Panics
    /// When `json` is not a pod template (a test's mistake).
    pub fn template_json(self, json: serde_json::Value) -> Self {
        let template = serde_json::from_value(json).expect("a pod template");
        self.template(template)
    }

    pub fn status(mut self, status: JinghzhuStatus) -> Self {
        self.0.status = Some(status);
        self
    }

    pub fn build(self) -> Jinghzhu {
        self.0
    }
}

impl From<JinghzhuBuilder> for Jinghzhu {
    fn from(builder: JinghzhuBuilder) -> Self {
        builder.build()
    }
}
