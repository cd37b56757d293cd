package controller

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	wit "github.com/wasm-operator/wasm-operator/plugins/go/controller/bindings/imports/wasm_operator_controller_types"
)

// Input is one reconcile's input: the parent and the children it controls.
type Input struct {
	raw  wit.ReconcileInput
	body map[string]any
}

// Child is a child the parent controls, as the host's cache has it.
type Child struct {
	object *wit.Object
}

// NewInput reads raw: the parent's body must be a JSON object (the host
// always sends one).
func NewInput(raw wit.ReconcileInput) (*Input, error) {
	body, err := decodeObject(raw.Parent.BodyJson)
	if err != nil {
		return nil, Permanent("the parent's body: %v", err)
	}
	return &Input{raw: raw, body: body}, nil
}

// Raw is the wire input, as the host sent it.
func (in *Input) Raw() *wit.ReconcileInput { return &in.raw }

// Meta is the parent's metadata.
func (in *Input) Meta() *wit.ObjectMeta { return &in.raw.Parent.Metadata }

// Name is the parent's name.
func (in *Input) Name() string { return in.raw.Parent.Metadata.Name }

// Namespace is the parent's namespace (every child lives there too).
func (in *Input) Namespace() string { return in.raw.Parent.Metadata.Namespace }

// Generation is the parent's `metadata.generation` (0 when not tracked).
func (in *Input) Generation() int64 { return in.raw.Parent.Metadata.Generation }

// IsDeleting reports whether the parent is being deleted (its children go
// with it: the host's owner references let Kubernetes collect them).
func (in *Input) IsDeleting() bool { return in.raw.Parent.Metadata.DeletionTimestamp.IsSome() }

// Label is the parent's label key.
func (in *Input) Label(key string) (string, bool) { return find(in.raw.Parent.Metadata.Labels, key) }

// ParentKind is the parent's `apiVersion` and `kind`.
func (in *Input) ParentKind() (apiVersion, kind string) {
	return in.raw.Parent.ApiVersion, in.raw.Parent.Kind
}

// Body is every top-level field of the parent but `apiVersion`, `kind` and
// `metadata`, e.g. `{"spec": {...}, "status": {...}}`. Numbers are
// json.Number.
func (in *Input) Body() map[string]any { return in.body }

// Spec is the parent's `spec` (nil when it has none).
func (in *Input) Spec() map[string]any { return asObject(in.body["spec"]) }

// Status is the parent's stored `status` (nil when it has none yet).
func (in *Input) Status() map[string]any { return asObject(in.body["status"]) }

// SpecInto decodes the parent's `spec` into v (a pointer to a struct with
// json tags); an absent spec reads as `{}`, so fields keep the values v
// had. A spec that does not fit is a permanent error naming the field.
func (in *Input) SpecInto(v any) error {
	spec, ok := in.body["spec"]
	if !ok || spec == nil {
		spec = map[string]any{}
	}
	text, err := json.Marshal(spec)
	if err != nil {
		return Permanent("invalid spec: %v", err)
	}
	if err := json.Unmarshal(text, v); err != nil {
		return Permanent("invalid spec: %v", err)
	}
	return nil
}

// Now is the host's clock at the start of this reconcile.
func (in *Input) Now() time.Time {
	return time.Unix(in.raw.Now.Seconds, int64(in.raw.Now.Nanoseconds)).UTC()
}

// Children are the children of kind (`Deployment`, or `apps/v1/Deployment`
// when two declared kinds share a name), sorted by name, terminating ones
// included. Empty when the controller does not declare the kind.
func (in *Input) Children(kind string) []Child {
	var out []Child
	for i := range in.raw.Children {
		entry := &in.raw.Children[i]
		if !namesKind(entry, kind) {
			continue
		}
		for j := range entry.Objects {
			out = append(out, Child{object: &entry.Objects[j]})
		}
	}
	return out
}

// Child is the child of kind named name.
func (in *Input) Child(kind, name string) (Child, bool) {
	for _, child := range in.Children(kind) {
		if child.Name() == name {
			return child, true
		}
	}
	return Child{}, false
}

// Declares reports whether the controller declares child kind kind (the
// host lists every declared kind, with children or not).
func (in *Input) Declares(kind string) bool {
	for i := range in.raw.Children {
		if namesKind(&in.raw.Children[i], kind) {
			return true
		}
	}
	return false
}

// Object is the wire object.
func (c Child) Object() *wit.Object { return c.object }

// Meta is its metadata.
func (c Child) Meta() *wit.ObjectMeta { return &c.object.Metadata }

// Name is its name.
func (c Child) Name() string { return c.object.Metadata.Name }

// Kind is its `kind`.
func (c Child) Kind() string { return c.object.Kind }

// APIVersion is its `apiVersion`.
func (c Child) APIVersion() string { return c.object.ApiVersion }

// IsDeleting reports whether it is being deleted.
func (c Child) IsDeleting() bool { return c.object.Metadata.DeletionTimestamp.IsSome() }

// Label is its label key.
func (c Child) Label(key string) (string, bool) { return find(c.object.Metadata.Labels, key) }

// Annotation is its annotation key.
func (c Child) Annotation(key string) (string, bool) {
	return find(c.object.Metadata.Annotations, key)
}

// Body is every top-level field but `apiVersion`, `kind` and `metadata`
// (parsed on each call: keep the map when reading several fields).
func (c Child) Body() (map[string]any, error) {
	body, err := decodeObject(c.object.BodyJson)
	if err != nil {
		return nil, Permanent("the body of %s %s: %v", c.object.Kind, c.object.Metadata.Name, err)
	}
	return body, nil
}

// Field is the value at the JSON pointer pointer of its body, e.g.
// `/status/readyReplicas` (false when absent or unreadable).
func (c Child) Field(pointer string) (any, bool) {
	body, err := c.Body()
	if err != nil {
		return nil, false
	}
	return Pointer(body, pointer)
}

// Pointer is the value at the JSON pointer pointer (RFC 6901) of value.
func Pointer(value any, pointer string) (any, bool) {
	if pointer == "" {
		return value, true
	}
	if !strings.HasPrefix(pointer, "/") {
		return nil, false
	}
	for _, token := range strings.Split(pointer[1:], "/") {
		token = strings.ReplaceAll(strings.ReplaceAll(token, "~1", "/"), "~0", "~")
		switch v := value.(type) {
		case map[string]any:
			next, ok := v[token]
			if !ok {
				return nil, false
			}
			value = next
		case []any:
			var i int
			if _, err := fmt.Sscanf(token, "%d", &i); err != nil || i < 0 || i >= len(v) {
				return nil, false
			}
			value = v[i]
		default:
			return nil, false
		}
	}
	return value, true
}

// namesKind reports whether kind (`Kind` or `apiVersion/Kind`) names the entry's kind.
func namesKind(entry *wit.Children, kind string) bool {
	if at := strings.LastIndex(kind, "/"); at >= 0 {
		return entry.ApiVersion == kind[:at] && entry.Kind == kind[at+1:]
	}
	return entry.Kind == kind
}

func find(entries []wit.KeyValue, key string) (string, bool) {
	for _, kv := range entries {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return "", false
}

func asObject(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// decodeJSON parses one JSON value, numbers as json.Number (exact).
func decodeJSON(text string) (any, error) {
	dec := json.NewDecoder(bytes.NewReader([]byte(text)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("text after the JSON value")
	}
	return v, nil
}

func decodeObject(text string) (map[string]any, error) {
	v, err := decodeJSON(text)
	if err != nil {
		return nil, fmt.Errorf("not JSON: %v", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("not a JSON object")
	}
	return m, nil
}
