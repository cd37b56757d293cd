//! The `JinghzhuPlugin` builder.

use wasm_operator_model::crd::plugin::{
    ConfigMapSourceSpec, JinghzhuPlugin, JinghzhuPluginSpec, ObjectSelectorSpec, OciSourceSpec,
    PluginSourceSpec, SecretKeyRef, VerificationKeySpec, VerificationSpec,
};

/// A `JinghzhuPlugin` named `name` (cluster-scoped) with an empty spec:
/// give it a source.
pub fn plugin_resource(name: &str) -> PluginResourceBuilder {
    PluginResourceBuilder(JinghzhuPlugin::new(name, JinghzhuPluginSpec::default()))
}

/// Builds a `JinghzhuPlugin` (see [`plugin_resource`]).
#[derive(Clone, Debug)]
#[must_use]
pub struct PluginResourceBuilder(JinghzhuPlugin);

impl PluginResourceBuilder {
    /// Its source: the key `plugin.wasm` of the ConfigMap `namespace/name`
    /// (and no other source).
    pub fn config_map(mut self, namespace: &str, name: &str) -> Self {
        self.0.spec.source = PluginSourceSpec {
            config_map: Some(ConfigMapSourceSpec {
                namespace: namespace.into(),
                name: name.into(),
                key: "plugin.wasm".into(),
            }),
            ..PluginSourceSpec::default()
        };
        self
    }

    /// Its source: the OCI `reference` (and no other source).
    pub fn oci(mut self, reference: &str) -> Self {
        self.0.spec.source = PluginSourceSpec {
            oci: Some(OciSourceSpec {
                reference: reference.into(),
            }),
            ..PluginSourceSpec::default()
        };
        self
    }

    /// Verified by one key, `release`: the `cosign.pub` of the Secret
    /// `namespace/secret`.
    pub fn verified_by(mut self, namespace: &str, secret: &str) -> Self {
        self.0.spec.verification = Some(VerificationSpec {
            keys: vec![VerificationKeySpec {
                name: "release".into(),
                secret_ref: SecretKeyRef {
                    namespace: namespace.into(),
                    name: secret.into(),
                    key: "cosign.pub".into(),
                },
            }],
            policy: None,
        });
        self
    }

    /// A tenant plugin serving the Jinghzhus of these namespaces.
    pub fn serving_namespaces(mut self, namespaces: &[&str]) -> Self {
        self.0.spec.selector = Some(ObjectSelectorSpec {
            namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
            labels: None,
        });
        self
    }

    pub fn build(self) -> JinghzhuPlugin {
        self.0
    }
}

impl From<PluginResourceBuilder> for JinghzhuPlugin {
    fn from(builder: PluginResourceBuilder) -> Self {
        builder.build()
    }
}
