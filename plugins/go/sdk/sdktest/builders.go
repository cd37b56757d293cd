package sdktest

import (
	"fmt"

	wit "github.com/wasm-operator/wasm-operator/plugins/go/bindings/imports/jinghzhu_operator_types"
	"github.com/wasm-operator/wasm-operator/plugins/go/sdk"
)

// JinghzhuBuilder builds a Jinghzhu; its methods return the builder.
type JinghzhuBuilder struct {
	inner JinghzhuObject
}

// Jinghzhu is a builder of a Jinghzhu asking for desired Pods, with no
// template and no status.
func Jinghzhu(name, namespace string, desired uint32) *JinghzhuBuilder {
	return &JinghzhuBuilder{inner: JinghzhuObject{Metadata: NewMeta(name, namespace), Desired: desired}}
}

// UID sets the uid.
func (b *JinghzhuBuilder) UID(uid string) *JinghzhuBuilder { b.inner.Metadata.UID = uid; return b }

// Generation sets metadata.generation.
func (b *JinghzhuBuilder) Generation(g int64) *JinghzhuBuilder {
	b.inner.Metadata.Generation = g
	return b
}

// Label sets a label.
func (b *JinghzhuBuilder) Label(key, value string) *JinghzhuBuilder {
	b.inner.Metadata.Labels = setKey(b.inner.Metadata.Labels, key, value)
	return b
}

// CreatedAt sets the creation time, in seconds.
func (b *JinghzhuBuilder) CreatedAt(seconds int64) *JinghzhuBuilder {
	b.inner.Metadata.CreationTimestamp = timeAt(seconds)
	return b
}

// DeletingAt marks the Jinghzhu as being deleted since seconds.
func (b *JinghzhuBuilder) DeletingAt(seconds int64) *JinghzhuBuilder {
	b.inner.Metadata.DeletionTimestamp = timeAt(seconds)
	return b
}

// Desired sets spec.desired.
func (b *JinghzhuBuilder) Desired(d uint32) *JinghzhuBuilder { b.inner.Desired = d; return b }

// WithTemplate sets the pod template.
func (b *JinghzhuBuilder) WithTemplate(t sdk.Template) *JinghzhuBuilder {
	b.inner.Template = &t
	return b
}

// WithStatus sets the stored status.
func (b *JinghzhuBuilder) WithStatus(s sdk.Status) *JinghzhuBuilder {
	b.inner.Status = &s
	return b
}

// Build is a deep copy of the Jinghzhu built so far.
func (b *JinghzhuBuilder) Build() JinghzhuObject { return b.inner.Clone() }

// Input is NewInput(b).
func (b *JinghzhuBuilder) Input() *InputBuilder { return NewInput(b) }

func setKey(m map[string]string, key, value string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}
	m[key] = value
	return m
}

func timeAt(seconds int64) *sdk.Timestamp {
	t := TS(seconds)
	return &t
}

// PodBuilder builds a Pod; its methods return the builder.
type PodBuilder struct {
	inner     PodObject
	autoOwner bool
}

// Pod is a builder of a Pod in phase (ready when running), owned by the
// input's Jinghzhu unless Unowned or OwnedBy another.
func Pod(name string, phase sdk.Phase) *PodBuilder {
	return &PodBuilder{
		inner:     PodObject{Metadata: NewMeta(name, ""), Phase: phase, Ready: phase == sdk.PhaseRunning},
		autoOwner: true,
	}
}

// Ready sets the Ready condition.
func (b *PodBuilder) Ready(r bool) *PodBuilder { b.inner.Ready = r; return b }

// CreatedAt sets the creation time, in seconds.
func (b *PodBuilder) CreatedAt(seconds int64) *PodBuilder {
	b.inner.Metadata.CreationTimestamp = timeAt(seconds)
	return b
}

// NoCreationTimestamp removes the creation time.
func (b *PodBuilder) NoCreationTimestamp() *PodBuilder {
	b.inner.Metadata.CreationTimestamp = nil
	return b
}

// Terminating is DeletingAt(DefaultNow).
func (b *PodBuilder) Terminating() *PodBuilder { return b.DeletingAt(DefaultNow) }

// DeletingAt marks the Pod as terminating since seconds.
func (b *PodBuilder) DeletingAt(seconds int64) *PodBuilder {
	b.inner.Metadata.DeletionTimestamp = timeAt(seconds)
	return b
}

// Label sets a label.
func (b *PodBuilder) Label(key, value string) *PodBuilder {
	b.inner.Metadata.Labels = setKey(b.inner.Metadata.Labels, key, value)
	return b
}

// OwnedBy adds a controller owner reference to owner.
func (b *PodBuilder) OwnedBy(owner *JinghzhuBuilder) *PodBuilder {
	b.inner.Metadata.OwnerReferences = append(b.inner.Metadata.OwnerReferences, ControllerReference(owner.inner))
	return b
}

// Unowned removes every owner reference, the default one included.
func (b *PodBuilder) Unowned() *PodBuilder {
	b.inner.Metadata.OwnerReferences = nil
	b.autoOwner = false
	return b
}

// InputBuilder builds a whole input.
type InputBuilder struct {
	jz       JinghzhuObject
	builders []*PodBuilder
	now      sdk.Timestamp
}

// NewInput is a builder of an input for the Jinghzhu jz (as built so far),
// with no Pods and `now` DefaultNow.
func NewInput(jz *JinghzhuBuilder) *InputBuilder {
	return &InputBuilder{jz: jz.Build(), now: TS(DefaultNow)}
}

// Pod adds a Pod.
func (b *InputBuilder) Pod(p *PodBuilder) *InputBuilder {
	b.builders = append(b.builders, p)
	return b
}

// Pods adds Pods.
func (b *InputBuilder) Pods(ps ...*PodBuilder) *InputBuilder {
	b.builders = append(b.builders, ps...)
	return b
}

// Now sets `now`, in seconds.
func (b *InputBuilder) Now(seconds int64) *InputBuilder { b.now = TS(seconds); return b }

// Objects are the plain objects of the input: Pods default to the
// Jinghzhu's namespace and controller reference.
func (b *InputBuilder) Objects() Objects {
	pods := make([]PodObject, len(b.builders))
	for i, pb := range b.builders {
		p := PodObject{Metadata: pb.inner.Metadata.Clone(), Phase: pb.inner.Phase, Ready: pb.inner.Ready}
		if p.Metadata.Namespace == "" {
			p.Metadata.Namespace = b.jz.Metadata.Namespace
		}
		if pb.autoOwner && len(p.Metadata.OwnerReferences) == 0 {
			p.Metadata.OwnerReferences = []sdk.OwnerReference{ControllerReference(b.jz)}
		}
		pods[i] = p
	}
	return Objects{Jinghzhu: b.jz.Clone(), Pods: pods, Now: b.now}
}

// Build is the wire record, as the host would send it.
func (b *InputBuilder) Build() wit.ReconcileInput { return EncodeInput(b.Objects()) }

// View is the view a plugin's reconcile receives (it panics if the input
// does not decode, which a built input always does).
func (b *InputBuilder) View() sdk.Input {
	raw := b.Build()
	in, err := sdk.Decode(&raw)
	if err != nil {
		panic(fmt.Sprintf("sdktest: built input does not decode: %v", err))
	}
	return in
}
