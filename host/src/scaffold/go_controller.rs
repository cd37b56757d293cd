//! `wasm-operator new NAME --kind GROUP/VERSION/KIND --owns KINDS --lang go`:
//! a contract 0.3 plugin project in Go, the counterpart of the Rust crate
//! of [`super::controller`]: the Go controller SDK (`plugins/go/controller`
//! with its bindings, embedded in this binary), a `Reconcile` that makes
//! one child per owned kind and sets a status (the same children, bodies
//! and status as the Rust scaffold), native Go tests, the scripts to
//! install the toolchain, test and build, and the same `controller.yaml`,
//! starting CRD and sample. The project's module path is its name: the
//! embedded Go files' imports of this repository's module are rewritten.

use std::path::{Path, PathBuf};

use crate::crd::controller::KindRef;

use super::controller::{CONTROLLER_YAML, CRD_YAML, ControllerScaffold, SAMPLE_YAML, WIT};
use super::go_common;
use super::kinds::Shape;

/// The Go controller SDK, as in `plugins/go/controller` (its tests stay in
/// this repository), bindings included.
const SDK: &[(&str, &str)] = embed!(
    "plugins/go/controller",
    [
        "doc.go",
        "controller.go",
        "input.go",
        "log.go",
        "output.go",
        "component/component.go",
        "controllertest/controllertest.go",
        "bindings/exports/export_wasm_operator_controller_reconciler/reconciler.go",
        "bindings/exports/wit_exports/wit_exports.go",
        "bindings/imports/wasm_operator_controller_log/empty.s",
        "bindings/imports/wasm_operator_controller_log/wit_bindings.go",
        "bindings/imports/wasm_operator_controller_reconciler/empty.s",
        "bindings/imports/wasm_operator_controller_reconciler/wit_bindings.go",
        "bindings/imports/wasm_operator_controller_types/empty.s",
        "bindings/imports/wasm_operator_controller_types/wit_bindings.go",
    ]
);

const README: &str = include_str!("template/go-controller/README.md.tmpl");
const TEST: &str = include_str!("template/go-controller/test.sh");
const MAIN: &str = include_str!("template/go-controller/main.go");
const PLUGIN: &str = include_str!("template/go-controller/plugin.go.tmpl");
const PLUGIN_TEST: &str = include_str!("template/go-controller/plugin_test.go");

/// The files of the Go project `name` (also its module path).
pub fn go_files(
    scaffold: &ControllerScaffold,
    name: &str,
    host_version: &str,
) -> Vec<(PathBuf, String)> {
    let wasm_path = format!("target/{name}.wasm");
    let fill = |template: &str| {
        scaffold
            .fill_common(template, name, host_version, &wasm_path)
            .replace("{{module}}", name)
            .replace("{{owns_go}}", &owns_go(scaffold))
            .replace("{{children_calls}}", &children_calls(scaffold))
            .replace("{{child_fns}}", &child_fns(scaffold))
    };
    let mut files = go_common::files(name, "controller", fill);
    files.extend([
        ("README.md".into(), fill(README)),
        ("test.sh".into(), TEST.to_string()),
        ("cmd/plugin/main.go".into(), fill(MAIN)),
        (
            "plugin/plugin.go".into(),
            format!("{}\n", fill(PLUGIN).trim_end()),
        ),
        ("plugin/plugin_test.go".into(), fill(PLUGIN_TEST)),
        ("wit/controller.wit".into(), WIT.to_string()),
        ("controller.yaml".into(), fill(CONTROLLER_YAML)),
        ("crd.yaml".into(), fill(CRD_YAML)),
        ("sample.yaml".into(), fill(SAMPLE_YAML)),
    ]);
    for (path, text) in SDK {
        files.push((
            Path::new("controller").join(path),
            go_common::with_module(text, name),
        ));
    }
    files
}

fn owns_go(scaffold: &ControllerScaffold) -> String {
    scaffold
        .owns
        .iter()
        .map(|c| format!("\t{{\"{}\", \"{}\"}},\n", c.kind.api_version, c.kind.kind))
        .collect()
}

/// One function name per child kind, unique: `deploymentChild`, ...
fn fn_names(scaffold: &ControllerScaffold) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for child in &scaffold.owns {
        let kind = &child.kind.kind;
        let mut chars = kind.chars();
        let first = chars.next().map(|c| c.to_ascii_lowercase());
        let base = format!(
            "{}{}Child",
            first.into_iter().collect::<String>(),
            chars.as_str()
        );
        let name = if names.contains(&base) {
            format!("{base}{}", names.len())
        } else {
            base
        };
        names.push(name);
    }
    names
}

fn children_calls(scaffold: &ControllerScaffold) -> String {
    fn_names(scaffold)
        .iter()
        .map(|f| format!("\t\t{f}(in, spec),\n"))
        .collect()
}

fn child_fns(scaffold: &ControllerScaffold) -> String {
    let shapes: Vec<Shape> = scaffold.owns.iter().map(|c| c.shape).collect();
    let pods = shapes.iter().any(|s| {
        matches!(
            s,
            Shape::Workload | Shape::Job | Shape::CronJob | Shape::Pod
        )
    });
    let mut out = String::new();
    if pods || shapes.contains(&Shape::Service) {
        out.push_str(SELECTOR_FN);
    }
    if pods {
        out.push_str(POD_FNS);
    }
    for (child, name) in scaffold.owns.iter().zip(fn_names(scaffold)) {
        out.push_str(&child_fn(&child.kind, child.shape, &name));
    }
    out
}

const SELECTOR_FN: &str = r#"
// selector is the labels of the parent's pods, and the selector that finds them.
func selector(in *controller.Input) map[string]string {
	return map[string]string{
		"app.kubernetes.io/name":     Name,
		"app.kubernetes.io/instance": in.Name(),
	}
}
"#;

const POD_FNS: &str = r#"
// podSpec is the pods' spec. The host holds every pod template to its pod
// policy (for declared controllers by default: the restricted profile,
// images pulled `Always`); this one passes it. restartPolicy "" leaves the
// kind's default.
func podSpec(spec *Spec, restartPolicy string) map[string]any {
	pod := map[string]any{
		"automountServiceAccountToken": false,
		"securityContext": map[string]any{
			"runAsNonRoot":   true,
			"runAsUser":      65535,
			"seccompProfile": map[string]any{"type": "RuntimeDefault"},
		},
		"containers": []any{map[string]any{
			"name":            "app",
			"image":           spec.Image,
			"imagePullPolicy": "Always",
			"securityContext": map[string]any{
				"allowPrivilegeEscalation": false,
				"capabilities":             map[string]any{"drop": []string{"ALL"}},
				"readOnlyRootFilesystem":   true,
			},
		}},
	}
	if restartPolicy != "" {
		pod["restartPolicy"] = restartPolicy
	}
	return pod
}

// podTemplate is a pod template of the parent's pods.
func podTemplate(in *controller.Input, spec *Spec, restartPolicy string) map[string]any {
	return map[string]any{
		"metadata": map[string]any{"labels": selector(in)},
		"spec":     podSpec(spec, restartPolicy),
	}
}
"#;

/// The Go function that builds the desired child of `kind`.
fn child_fn(kind: &KindRef, shape: Shape, name: &str) -> String {
    let KindRef { api_version, kind } = kind;
    let make = format!("child(\"{api_version}\", \"{kind}\", in)");
    let body = match shape {
        Shape::Workload => {
            // gofmt aligns the values after the longest key.
            let pad = if kind == "StatefulSet" { "   " } else { "" };
            let replicas = if kind == "DaemonSet" {
                String::new()
            } else {
                format!("\n\t\t\t\"replicas\": {pad}spec.Replicas,")
            };
            let service = if kind == "StatefulSet" {
                "\n\t\t\t\"serviceName\": in.Name(),"
            } else {
                ""
            };
            format!(
                "{{\n\t\t\"spec\": map[string]any{{{replicas}{service}\n\t\t\t\"selector\": {pad}map[string]any{{\"matchLabels\": selector(in)}},\n\t\t\t\"template\": {pad}podTemplate(in, spec, \"\"),\n\t\t}},\n\t}}"
            )
        }
        Shape::Job => "{\n\t\t\"spec\": map[string]any{\"backoffLimit\": 3, \"template\": podTemplate(in, spec, \"Never\")},\n\t}".to_string(),
        Shape::CronJob => "{\n\t\t\"spec\": map[string]any{\n\t\t\t\"schedule\":    \"*/30 * * * *\",\n\t\t\t\"jobTemplate\": map[string]any{\"spec\": map[string]any{\"template\": podTemplate(in, spec, \"Never\")}},\n\t\t},\n\t}".to_string(),
        Shape::Pod => "{\"spec\": podSpec(spec, \"\")}".to_string(),
        Shape::Service => "{\n\t\t\"spec\": map[string]any{\n\t\t\t\"selector\": selector(in),\n\t\t\t\"ports\":    []any{map[string]any{\"name\": \"http\", \"port\": 80, \"targetPort\": 8080}},\n\t\t},\n\t}".to_string(),
        Shape::ConfigMap => "{\"data\": map[string]any{\"parent\": in.Name()}}".to_string(),
        // Base64 values; the host never logs a child's body.
        Shape::Secret => "{\"type\": \"Opaque\", \"data\": map[string]any{}}".to_string(),
        Shape::Claim => "{\n\t\t\"spec\": map[string]any{\n\t\t\t\"accessModes\": []string{\"ReadWriteOnce\"},\n\t\t\t\"resources\":   map[string]any{\"requests\": map[string]any{\"storage\": \"1Gi\"}},\n\t\t},\n\t}".to_string(),
        Shape::Ingress => "{\n\t\t\"spec\": map[string]any{\n\t\t\t\"rules\": []any{map[string]any{\"http\": map[string]any{\"paths\": []any{map[string]any{\n\t\t\t\t\"path\":     \"/\",\n\t\t\t\t\"pathType\": \"Prefix\",\n\t\t\t\t\"backend\":  map[string]any{\"service\": map[string]any{\"name\": in.Name(), \"port\": map[string]any{\"number\": 80}}},\n\t\t\t}}}}},\n\t\t},\n\t}".to_string(),
        Shape::Other => match kind.as_str() {
            "ServiceAccount" => "{}".to_string(),
            "Role" => "{\"rules\": []any{}}".to_string(),
            _ => "{\"spec\": map[string]any{}}".to_string(),
        },
    };
    let fill_in = if shape == Shape::Other {
        format!(
            "\t// Fill in what a {kind} needs: its top-level fields but apiVersion,\n\t// kind and metadata.\n"
        )
    } else if shape == Shape::Pod {
        "\tlabels := selector(in)\n".to_string()
    } else {
        String::new()
    };
    let make = if shape == Shape::Pod {
        format!("{make}.WithLabels(labels)")
    } else {
        make
    };
    format!(
        "\n// {name} is the {kind} (`{api_version}`).\nfunc {name}(in *controller.Input, spec *Spec) *controller.Desired {{\n{fill_in}\treturn {make}.WithBody(map[string]any{body})\n}}\n"
    )
}
