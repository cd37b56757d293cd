//! `wasm-operator new NAME --kind GROUP/VERSION/KIND --owns KINDS`: a
//! contract 0.3 plugin crate (world `controller`) on the controller SDK
//! (`plugins/controller-sdk`), with a `reconcile` that makes one child per
//! owned kind and sets a status, native tests, the `PluginController`
//! declaring it (`controller.yaml`), a starting CRD and sample of the
//! parent, and a README with the next steps.
//!
//! The code of each child kind is generated here ([`child_fn`]): a
//! workload gets a pod template that the host's default pod policy for
//! declared controllers admits (restricted profile, images pulled
//! `Always`), a Service selects those pods, other kinds start from a small
//! valid body or an empty `spec` to fill in.

use crate::crd::controller::KindRef;

use super::kinds::{ChildKind, Shape, plural};

const CARGO_TOML: &str = include_str!("template/controller/Cargo.toml.tmpl");
const LIB_RS: &str = include_str!("template/controller/lib.rs.tmpl");
const README: &str = include_str!("template/controller/README.md.tmpl");
/// The `PluginController`, the starting CRD and sample (every language's).
pub(super) const CONTROLLER_YAML: &str = include_str!("template/controller/controller.yaml.tmpl");
pub(super) const CRD_YAML: &str = include_str!("template/controller/crd.yaml.tmpl");
pub(super) const SAMPLE_YAML: &str = include_str!("template/controller/sample.yaml.tmpl");
const GITIGNORE: &str = include_str!("template/gitignore");
/// Contract 0.3, embedded in every language's project.
pub(super) const WIT: &str = include_str!("../../../wit/0.3/controller.wit");

/// The WIT package of contract 0.3.
pub const WIT_PACKAGE: &str = "wasm-operator:controller@0.3.0";

/// The SDK crate a 0.3 plugin depends on.
pub const SDK_PACKAGE: &str = "wasm-operator-controller-sdk";

/// A 0.3 controller to scaffold.
#[derive(Debug, Clone)]
pub struct ControllerScaffold {
    /// The parent kind.
    pub parent: KindRef,
    /// The child kinds, in declaration order.
    pub owns: Vec<ChildKind>,
    /// `--allow-child-kind` names the author gave (the host needs them too).
    pub allowed: Vec<String>,
}

/// The SDK's dependency texts: the `Cargo.toml` line, its comment and the
/// README's paragraph.
pub struct SdkTexts {
    /// The dependency line.
    pub dependency: String,
    /// Its comment.
    pub comment: String,
    /// The README's paragraph.
    pub note: String,
}

impl ControllerScaffold {
    /// The files of the crate `name`, as (relative path, contents); `lock`
    /// is its `Cargo.lock`.
    pub fn rust_files(
        &self,
        name: &str,
        host_version: &str,
        sdk: &SdkTexts,
        lock: String,
    ) -> Vec<(std::path::PathBuf, String)> {
        let crate_name = name.replace('-', "_");
        let wasm_path = format!("target/wasm32-wasip2/release/{crate_name}.wasm");
        let fill = |template: &str| {
            self.fill_common(template, name, host_version, &wasm_path)
                .replace("{{crate_name}}", &crate_name)
                .replace("{{owns_array}}", &self.owns_array())
                .replace("{{children_calls}}", &self.children_calls())
                .replace("{{child_fns}}", &self.child_fns())
                .replace("{{sdk_dependency}}", &sdk.dependency)
                .replace("{{sdk_comment}}", &sdk.comment)
                .replace("{{sdk_note}}", &sdk.note)
        };
        vec![
            ("Cargo.toml".into(), fill(CARGO_TOML)),
            ("Cargo.lock".into(), lock),
            ("README.md".into(), fill(README)),
            (".gitignore".into(), GITIGNORE.to_string()),
            ("src/lib.rs".into(), fill(LIB_RS)),
            ("wit/controller.wit".into(), WIT.to_string()),
            ("controller.yaml".into(), fill(CONTROLLER_YAML)),
            ("crd.yaml".into(), fill(CRD_YAML)),
            ("sample.yaml".into(), fill(SAMPLE_YAML)),
        ]
    }

    /// `template` with the placeholders every language shares filled: the
    /// plugin's name, the parent, the children's YAML and prose, the
    /// `--allow-child-kind` flag and where the built plugin is.
    pub(super) fn fill_common(
        &self,
        template: &str,
        name: &str,
        host_version: &str,
        wasm_path: &str,
    ) -> String {
        let (group, version) = self.parent.group_version();
        let allow_flag = if self.allowed.is_empty() {
            String::new()
        } else {
            format!(" --allow-child-kind {}", self.allowed.join(","))
        };
        template
            .replace("{{name}}", name)
            .replace("{{wit_package}}", WIT_PACKAGE)
            .replace("{{host_version}}", host_version)
            .replace("{{parent_api_version}}", &self.parent.api_version)
            .replace("{{parent_kind}}", &self.parent.kind)
            .replace("{{parent_group}}", group)
            .replace("{{parent_version}}", version)
            .replace("{{plural}}", &plural(&self.parent.kind))
            .replace("{{singular}}", &self.parent.kind.to_ascii_lowercase())
            .replace("{{owns_sentence}}", &self.owns_sentence())
            .replace("{{children_yaml}}", &self.children_yaml())
            .replace("{{allow_flag}}", &allow_flag)
            .replace("{{wasm_path}}", wasm_path)
    }

    /// `a Deployment and a Service (apps/v1, v1)`-like prose.
    fn owns_sentence(&self) -> String {
        let kinds: Vec<String> = self
            .owns
            .iter()
            .map(|c| format!("a {} (`{}`)", c.kind.kind, c.kind.api_version))
            .collect();
        match kinds.as_slice() {
            [] => String::new(),
            [one] => one.clone(),
            [init @ .., last] => format!("{} and {last}", init.join(", ")),
        }
    }

    fn owns_array(&self) -> String {
        self.owns
            .iter()
            .map(|c| format!("    (\"{}\", \"{}\"),\n", c.kind.api_version, c.kind.kind))
            .collect()
    }

    fn children_yaml(&self) -> String {
        self.owns
            .iter()
            .map(|c| {
                format!(
                    "    - apiVersion: {}\n      kind: {}\n      maxCount: 1\n",
                    c.kind.api_version, c.kind.kind
                )
            })
            .collect()
    }

    /// One function name per child kind, unique.
    fn fn_names(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for child in &self.owns {
            let base = snake_case(&child.kind.kind);
            let name = if names.contains(&base) {
                format!("{base}_{}", names.len())
            } else {
                base
            };
            names.push(name);
        }
        names
    }

    fn children_calls(&self) -> String {
        self.fn_names()
            .iter()
            .map(|f| format!("        {f}(input, spec),\n"))
            .collect()
    }

    fn child_fns(&self) -> String {
        let mut out = String::new();
        let shapes: Vec<Shape> = self.owns.iter().map(|c| c.shape).collect();
        let pods = shapes.iter().any(|s| {
            matches!(
                s,
                Shape::Workload | Shape::Job | Shape::CronJob | Shape::Pod
            )
        });
        let selects = pods || shapes.iter().any(|s| matches!(s, Shape::Service));
        if selects {
            out.push_str(SELECTOR_FN);
        }
        if pods {
            out.push_str(POD_FNS);
        }
        for (child, name) in self.owns.iter().zip(self.fn_names()) {
            out.push_str(&child_fn(child, &name));
        }
        out
    }
}

const SELECTOR_FN: &str = r#"
/// The labels of the parent's pods, and the selector that finds them.
fn selector(input: &Input) -> Value {
    json!({
        "app.kubernetes.io/name": NAME,
        "app.kubernetes.io/instance": input.name(),
    })
}
"#;

const POD_FNS: &str = r#"
/// The pods' spec. The host holds every pod template to its pod policy
/// (for declared controllers by default: the restricted profile, images
/// pulled `Always`); this one passes it.
fn pod_spec(spec: &Spec) -> Value {
    json!({
        "automountServiceAccountToken": false,
        "securityContext": {
            "runAsNonRoot": true,
            "runAsUser": 65535,
            "seccompProfile": { "type": "RuntimeDefault" },
        },
        "containers": [{
            "name": "app",
            "image": spec.image,
            "imagePullPolicy": "Always",
            "securityContext": {
                "allowPrivilegeEscalation": false,
                "capabilities": { "drop": ["ALL"] },
                "readOnlyRootFilesystem": true,
            },
        }],
    })
}

/// A pod template of the parent's pods.
fn pod_template(input: &Input, spec: &Spec) -> Value {
    json!({ "metadata": { "labels": selector(input) }, "spec": pod_spec(spec) })
}
"#;

/// The function that builds the desired child of `child`'s kind.
fn child_fn(child: &ChildKind, name: &str) -> String {
    let KindRef { api_version, kind } = &child.kind;
    let (uses_spec, body) = body_of(child);
    let spec_arg = if uses_spec { "spec" } else { "_spec" };
    format!(
        r#"
/// The {kind} (`{api_version}`).
fn {name}(input: &Input, {spec_arg}: &Spec) -> Desired {{
{body}
}}
"#
    )
}

/// Whether the body uses the spec, and the function's body.
fn body_of(child: &ChildKind) -> (bool, String) {
    let KindRef { api_version, kind } = &child.kind;
    let make = format!("child(\"{api_version}\", \"{kind}\", input)");
    let with_body = |json: &str| format!("    {make}.body(json!({json}))");
    match child.shape {
        Shape::Workload => {
            let replicas = if kind == "DaemonSet" {
                ""
            } else {
                "\n            \"replicas\": spec.replicas,"
            };
            let service = if kind == "StatefulSet" {
                "\n            \"serviceName\": input.name(),"
            } else {
                ""
            };
            (
                true,
                with_body(&format!(
                    "{{\n        \"spec\": {{{replicas}{service}\n            \"selector\": {{ \"matchLabels\": selector(input) }},\n            \"template\": pod_template(input, spec),\n        }},\n    }}"
                )),
            )
        }
        Shape::Job => (
            true,
            format!(
                "    let mut template = pod_template(input, spec);\n    template[\"spec\"][\"restartPolicy\"] = json!(\"Never\");\n    {make}.body(json!({{ \"spec\": {{ \"backoffLimit\": 3, \"template\": template }} }}))"
            ),
        ),
        Shape::CronJob => (
            true,
            format!(
                "    let mut template = pod_template(input, spec);\n    template[\"spec\"][\"restartPolicy\"] = json!(\"Never\");\n    {make}.body(json!({{\n        \"spec\": {{\n            \"schedule\": \"*/30 * * * *\",\n            \"jobTemplate\": {{ \"spec\": {{ \"template\": template }} }},\n        }},\n    }}))"
            ),
        ),
        Shape::Pod => (
            true,
            format!(
                "    let labels = selector(input);\n    let labels = labels.as_object().into_iter().flatten();\n    {make}\n        .labels(labels.map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())))\n        .body(json!({{ \"spec\": pod_spec(spec) }}))"
            ),
        ),
        Shape::Service => (
            false,
            with_body(
                "{\n        \"spec\": {\n            \"selector\": selector(input),\n            \"ports\": [{ \"name\": \"http\", \"port\": 80, \"targetPort\": 8080 }],\n        },\n    }",
            ),
        ),
        Shape::ConfigMap => (
            false,
            with_body("{ \"data\": { \"parent\": input.name() } }"),
        ),
        Shape::Secret => (
            false,
            format!(
                "    // Base64 values; the host never logs a child's body.\n    {make}.body(json!({{ \"type\": \"Opaque\", \"data\": {{}} }}))"
            ),
        ),
        Shape::Claim => (
            false,
            with_body(
                "{\n        \"spec\": {\n            \"accessModes\": [\"ReadWriteOnce\"],\n            \"resources\": { \"requests\": { \"storage\": \"1Gi\" } },\n        },\n    }",
            ),
        ),
        Shape::Ingress => (
            false,
            with_body(
                "{\n        \"spec\": {\n            \"rules\": [{ \"http\": { \"paths\": [{\n                \"path\": \"/\",\n                \"pathType\": \"Prefix\",\n                \"backend\": { \"service\": { \"name\": input.name(), \"port\": { \"number\": 80 } } },\n            }] } }],\n        },\n    }",
            ),
        ),
        Shape::Other => (
            false,
            format!(
                "    // Fill in what a {kind} needs: its top-level fields but apiVersion,\n    // kind and metadata.\n{}",
                with_body(other_body(kind))
            ),
        ),
    }
}

/// A starting body of a kind without a shape of its own.
fn other_body(kind: &str) -> &'static str {
    match kind {
        "ServiceAccount" => "{}",
        "Role" => "{ \"rules\": [] }",
        _ => "{ \"spec\": {} }",
    }
}

/// `PersistentVolumeClaim` → `persistent_volume_claim`.
fn snake_case(kind: &str) -> String {
    let mut out = String::new();
    for (i, c) in kind.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    // Rust keywords a kind could spell.
    if matches!(
        out.as_str(),
        "type" | "match" | "struct" | "impl" | "mod" | "fn" | "self"
    ) {
        out.push_str("_child");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_become_function_names() {
        assert_eq!(
            snake_case("PersistentVolumeClaim"),
            "persistent_volume_claim"
        );
        assert_eq!(snake_case("Service"), "service");
        assert_eq!(snake_case("Type"), "type_child");
    }
}
