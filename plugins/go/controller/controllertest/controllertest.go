// Package controllertest builds a parent with its children as the host
// would pass them to a 0.3 controller plugin, and runs a
// controller.ReconcileFunc on them natively (`go test`), through the same
// wire encoding as the component:
//
//	fixture := controllertest.Parent("example.com/v1", "WebApp", "sample").
//		Spec(map[string]any{"replicas": 2}).
//		Declare("apps/v1", "Deployment")
//	out, err := controllertest.Reconcile(plugin.Reconcile, fixture)
package controllertest

import (
	"encoding/json"
	"sort"

	witTypes "go.bytecodealliance.org/pkg/wit/types"

	"github.com/wasm-operator/wasm-operator/plugins/go/controller"
	wit "github.com/wasm-operator/wasm-operator/plugins/go/controller/bindings/imports/wasm_operator_controller_types"
)

// DefaultNow is the `now` of every fixture (2024-01-01T00:00:00Z) unless set.
const DefaultNow int64 = 1_704_067_200

// Fixture is a parent with the child kinds its controller declares and
// the children it controls.
type Fixture struct {
	raw  wit.ReconcileInput
	body map[string]any
}

// Parent is a parent of kind (in apiVersion) named name in namespace
// `default`, generation 1, with an empty body and no child kind declared.
func Parent(apiVersion, kind, name string) *Fixture {
	return &Fixture{
		raw: wit.ReconcileInput{
			Parent: wit.Object{
				ApiVersion: apiVersion,
				Kind:       kind,
				Metadata:   meta(name, "default", name+"-uid"),
				BodyJson:   "{}",
			},
			Now: wit.Timestamp{Seconds: DefaultNow},
		},
		body: map[string]any{},
	}
}

func meta(name, namespace, uid string) wit.ObjectMeta {
	return wit.ObjectMeta{
		Name:              name,
		Namespace:         namespace,
		Uid:               uid,
		ResourceVersion:   "1",
		Generation:        1,
		CreationTimestamp: witTypes.Some(wit.Timestamp{Seconds: DefaultNow - 60}),
		DeletionTimestamp: witTypes.None[wit.Timestamp](),
	}
}

// clone copies the fixture (builders never change the one they are called on).
func (f *Fixture) clone() *Fixture {
	body := map[string]any{}
	for k, v := range f.body {
		body[k] = v
	}
	out := &Fixture{raw: f.raw, body: body}
	out.raw.Children = make([]wit.Children, len(f.raw.Children))
	for i, c := range f.raw.Children {
		c.Objects = append([]wit.Object(nil), c.Objects...)
		out.raw.Children[i] = c
	}
	return out
}

// Spec sets the parent's `spec`.
func (f *Fixture) Spec(spec map[string]any) *Fixture { return f.Field("spec", spec) }

// Status sets the parent's stored `status`.
func (f *Fixture) Status(status map[string]any) *Fixture { return f.Field("status", status) }

// Field sets the parent's top-level field key.
func (f *Fixture) Field(key string, value any) *Fixture {
	out := f.clone()
	out.body[key] = value
	return out
}

// Generation sets the parent's `metadata.generation`.
func (f *Fixture) Generation(g int64) *Fixture {
	out := f.clone()
	out.raw.Parent.Metadata.Generation = g
	return out
}

// Deleting marks the parent as being deleted.
func (f *Fixture) Deleting() *Fixture {
	out := f.clone()
	out.raw.Parent.Metadata.DeletionTimestamp = witTypes.Some(wit.Timestamp{Seconds: DefaultNow})
	return out
}

// Declare adds a child kind the controller declares (listed even when empty).
func (f *Fixture) Declare(apiVersion, kind string) *Fixture {
	out := f.clone()
	out.raw.Children = append(out.raw.Children, wit.Children{ApiVersion: apiVersion, Kind: kind})
	return out
}

// Child adds child, controlled by the parent, under its declared kind
// (declared here when it is not yet); children stay sorted by name.
func (f *Fixture) Child(child wit.Object) *Fixture {
	out := f.clone()
	p := out.raw.Parent
	child.Metadata.Namespace = p.Metadata.Namespace
	child.Metadata.OwnerReferences = []wit.OwnerReference{{
		ApiVersion: p.ApiVersion, Kind: p.Kind, Name: p.Metadata.Name, Uid: p.Metadata.Uid, Controller: true,
	}}
	at := -1
	for i, c := range out.raw.Children {
		if c.ApiVersion == child.ApiVersion && c.Kind == child.Kind {
			at = i
		}
	}
	if at < 0 {
		out.raw.Children = append(out.raw.Children, wit.Children{ApiVersion: child.ApiVersion, Kind: child.Kind})
		at = len(out.raw.Children) - 1
	}
	objects := append(out.raw.Children[at].Objects, child)
	sort.SliceStable(objects, func(i, j int) bool { return objects[i].Metadata.Name < objects[j].Metadata.Name })
	out.raw.Children[at].Objects = objects
	return out
}

// Input is the wire input (the parent's body encoded).
func (f *Fixture) Input() wit.ReconcileInput {
	raw := f.clone().raw
	text, err := json.Marshal(f.body)
	if err != nil {
		panic("controllertest: the parent's body is not JSON: " + err.Error())
	}
	raw.Parent.BodyJson = string(text)
	return raw
}

// View is the input as a plugin reads it.
func (f *Fixture) View() *controller.Input {
	in, err := controller.NewInput(f.Input())
	if err != nil {
		panic("controllertest: " + err.Error())
	}
	return in
}

// Object is a child of kind (in apiVersion) named name with body (its
// top-level fields but apiVersion, kind and metadata).
func Object(apiVersion, kind, name string, body map[string]any) wit.Object {
	text, err := json.Marshal(body)
	if err != nil {
		panic("controllertest: the body is not JSON: " + err.Error())
	}
	return wit.Object{
		ApiVersion: apiVersion,
		Kind:       kind,
		Metadata:   meta(name, "default", name+"-"+kind+"-uid"),
		BodyJson:   string(text),
	}
}

// Reconcile runs f on the fixture as the component would (wire input in,
// wire output checked to encode) and returns its output, or its error as
// a *controller.ReconcileError.
func Reconcile(f controller.ReconcileFunc, fixture *Fixture) (*controller.Output, error) {
	in := fixture.View()
	out, err := f(in)
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = controller.NewOutput()
	}
	if _, err := out.ToWire(); err != nil {
		return nil, err
	}
	return out, nil
}
