package controller

import (
	"encoding/json"
	"math"
	"sort"
	"time"

	witTypes "go.bytecodealliance.org/pkg/wit/types"

	wit "github.com/wasm-operator/wasm-operator/plugins/go/controller/bindings/imports/wasm_operator_controller_types"
)

// Desired is a child as the plugin wants it. The host adds the namespace,
// the owner reference to the parent and its own label; never set those.
type Desired struct {
	// APIVersion is e.g. `apps/v1`, or `v1` for the core group.
	APIVersion string
	// Kind is e.g. `Deployment`.
	Kind string
	// Name is its exact name (server-side apply needs one: derive it from
	// the parent's, so every reconcile proposes the same child).
	Name string
	// Labels besides the host's own.
	Labels map[string]string
	// Annotations.
	Annotations map[string]string
	// Body is every top-level field but `apiVersion`, `kind` and
	// `metadata`, e.g. `{"spec": {...}}` or `{"data": {...}}`.
	Body map[string]any
}

// NewDesired is a child of kind (in apiVersion) named name, with an empty body.
func NewDesired(apiVersion, kind, name string) *Desired {
	return &Desired{
		APIVersion:  apiVersion,
		Kind:        kind,
		Name:        name,
		Labels:      map[string]string{},
		Annotations: map[string]string{},
		Body:        map[string]any{},
	}
}

// WithLabel sets label key to value.
func (d *Desired) WithLabel(key, value string) *Desired {
	d.Labels[key] = value
	return d
}

// WithLabels sets every label of labels.
func (d *Desired) WithLabels(labels map[string]string) *Desired {
	for k, v := range labels {
		d.Labels[k] = v
	}
	return d
}

// WithAnnotation sets annotation key to value.
func (d *Desired) WithAnnotation(key, value string) *Desired {
	d.Annotations[key] = value
	return d
}

// WithBody sets the body (`{"spec": ...}`, `{"data": ...}`).
func (d *Desired) WithBody(body map[string]any) *Desired {
	d.Body = body
	return d
}

// Field is the value at the JSON pointer pointer of its body (for tests),
// as JSON would read it back (numbers as json.Number).
func (d *Desired) Field(pointer string) (any, bool) {
	body, err := normalize(d.Body)
	if err != nil {
		return nil, false
	}
	return Pointer(body, pointer)
}

func (d *Desired) toWire() (wit.DesiredChild, error) {
	body := d.Body
	if body == nil {
		body = map[string]any{}
	}
	text, err := json.Marshal(body)
	if err != nil {
		return wit.DesiredChild{}, Permanent("the body of %s %s is not JSON: %v", d.Kind, d.Name, err)
	}
	return wit.DesiredChild{
		ApiVersion:  d.APIVersion,
		Kind:        d.Kind,
		Name:        d.Name,
		Labels:      pairs(d.Labels),
		Annotations: pairs(d.Annotations),
		BodyJson:    string(text),
	}, nil
}

// ChildRef names a child to delete.
type ChildRef struct {
	APIVersion string
	Kind       string
	Name       string
}

// EventType is the severity of an Event.
type EventType uint8

// The event types, numbered as the WIT `event-type` enum.
const (
	EventNormal EventType = iota
	EventWarning
)

// Event is a Kubernetes Event to record on the parent.
type Event struct {
	Type EventType
	// Reason is a short UpperCamelCase reason, e.g. `Scaled`.
	Reason string
	// Message is a sentence for humans.
	Message string
}

// Normal is a Normal Event.
func Normal(reason, message string) Event { return Event{EventNormal, reason, message} }

// Warning is a Warning Event.
func Warning(reason, message string) Event { return Event{EventWarning, reason, message} }

// Output is a reconcile's output, built up by the plugin.
type Output struct {
	// Children to create or update (server-side applied).
	Children []*Desired
	// Deletes are children to delete (only children the parent controls are).
	Deletes []ChildRef
	// Status is the parent's new `status`; nil: no write.
	Status map[string]any
	// RequeueAfter: reconcile again after this long (0: no requeue).
	RequeueAfter time.Duration
	// Events to record on the parent.
	Events []Event
}

// NewOutput is an output that does nothing.
func NewOutput() *Output { return &Output{} }

// Apply wants child to exist as given.
func (o *Output) Apply(child *Desired) *Output {
	o.Children = append(o.Children, child)
	return o
}

// Delete deletes the child of kind named name.
func (o *Output) Delete(apiVersion, kind, name string) *Output {
	o.Deletes = append(o.Deletes, ChildRef{apiVersion, kind, name})
	return o
}

// SetStatus sets the parent's status to status, unless the stored one is
// already equal as JSON (then nothing is written).
func (o *Output) SetStatus(in *Input, status map[string]any) *Output {
	stored, hasStatus := in.body["status"]
	if hasStatus && sameJSON(stored, status) {
		o.Status = nil
	} else {
		o.Status = status
	}
	return o
}

// Record records event on the parent.
func (o *Output) Record(event Event) *Output {
	o.Events = append(o.Events, event)
	return o
}

// Requeue reconciles again after after (e.g. to poll something that sends
// no watch event).
func (o *Output) Requeue(after time.Duration) *Output {
	o.RequeueAfter = after
	return o
}

// Applied are the children of kind it applies (for tests).
func (o *Output) Applied(kind string) []*Desired {
	var out []*Desired
	for _, child := range o.Children {
		if child.Kind == kind {
			out = append(out, child)
		}
	}
	return out
}

// ToWire is the wire output.
func (o *Output) ToWire() (wit.ReconcileOutput, error) {
	wire := wit.ReconcileOutput{
		Apply:          make([]wit.DesiredChild, 0, len(o.Children)),
		Delete:         make([]wit.ChildRef, 0, len(o.Deletes)),
		StatusJson:     witTypes.None[string](),
		RequeueAfterMs: witTypes.None[uint64](),
		Events:         make([]wit.Event, 0, len(o.Events)),
	}
	for _, child := range o.Children {
		if child == nil {
			return wit.ReconcileOutput{}, Permanent("a nil child in the output")
		}
		desired, err := child.toWire()
		if err != nil {
			return wit.ReconcileOutput{}, err
		}
		wire.Apply = append(wire.Apply, desired)
	}
	for _, ref := range o.Deletes {
		wire.Delete = append(wire.Delete, wit.ChildRef{ApiVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name})
	}
	if o.Status != nil {
		text, err := json.Marshal(o.Status)
		if err != nil {
			return wit.ReconcileOutput{}, Permanent("the status is not JSON: %v", err)
		}
		wire.StatusJson = witTypes.Some(string(text))
	}
	if o.RequeueAfter > 0 {
		ms := o.RequeueAfter.Milliseconds()
		if ms < 1 {
			ms = 1
		}
		if ms > math.MaxInt64 {
			ms = math.MaxInt64
		}
		wire.RequeueAfterMs = witTypes.Some(uint64(ms))
	}
	for _, e := range o.Events {
		wire.Events = append(wire.Events, wit.Event{EventType: wit.EventType(e.Type), Reason: e.Reason, Message: e.Message})
	}
	return wire, nil
}

// pairs is m as key-value records, sorted by key.
func pairs(m map[string]string) []wit.KeyValue {
	out := make([]wit.KeyValue, 0, len(m))
	for k, v := range m {
		out = append(out, wit.KeyValue{Key: k, Value: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}
