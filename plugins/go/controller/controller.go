package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"

	wit "github.com/wasm-operator/wasm-operator/plugins/go/controller/bindings/imports/wasm_operator_controller_types"
)

// WITPackage is the WIT package this SDK implements.
const WITPackage = "wasm-operator:controller@0.3.0"

// ReconcileFunc is a plugin's logic: the children and status that bring
// the cluster towards the parent's spec. It must be a pure, idempotent
// function of its input: the host calls it again on every change and
// after every requeue. An error made with [Permanent] is not retried
// without a change; any other error is retried with backoff.
type ReconcileFunc func(in *Input) (*Output, error)

// ReconcileError is a failed reconcile as the host sees it.
type ReconcileError struct {
	// Message says what went wrong (logs and a Warning Event).
	Message string
	// Retryable: trying again later may succeed (exponential backoff).
	Retryable bool
}

// Error is the message.
func (e *ReconcileError) Error() string { return e.Message }

// Permanent is an error that trying again without a change will not fix
// (e.g. an invalid spec).
func Permanent(format string, args ...any) error {
	return &ReconcileError{Message: fmt.Sprintf(format, args...)}
}

// Retryable is an error that may go away (the host retries with backoff).
func Retryable(format string, args ...any) error {
	return &ReconcileError{Message: fmt.Sprintf(format, args...), Retryable: true}
}

// Call runs f on a wire input and encodes its outcome: what the component
// export calls, and what tests call through controllertest. A panic in f
// becomes a permanent error naming it.
func Call(f ReconcileFunc, raw wit.ReconcileInput) (wit.ReconcileOutput, *wit.ReconcileError) {
	in, err := NewInput(raw)
	if err != nil {
		return wit.ReconcileOutput{}, toWire(err)
	}
	out, err := protect(f, in)
	var wire wit.ReconcileOutput
	if err == nil {
		wire, err = out.ToWire()
	}
	if err != nil {
		Log.Warn("reconcile failed", "parent", in.Name(), "error", err.Error())
		return wit.ReconcileOutput{}, toWire(err)
	}
	status := "unchanged"
	if wire.StatusJson.IsSome() {
		status = "changed"
	}
	Log.Debug("reconciled", "parent", in.Name(), "apply", strconv.Itoa(len(wire.Apply)),
		"delete", strconv.Itoa(len(wire.Delete)), "status", status)
	return wire, nil
}

func protect(f ReconcileFunc, in *Input) (out *Output, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, Permanent("the plugin panicked: %v", r)
		}
	}()
	out, err = f(in)
	if err == nil && out == nil {
		out = NewOutput()
	}
	return out, err
}

func toWire(err error) *wit.ReconcileError {
	var re *ReconcileError
	if errors.As(err, &re) {
		return &wit.ReconcileError{Message: re.Message, Retryable: re.Retryable}
	}
	return &wit.ReconcileError{Message: err.Error(), Retryable: true}
}

// sameJSON reports whether a and b encode the same JSON value (numbers
// compared by their text, object keys in any order).
func sameJSON(a, b any) bool {
	na, errA := normalize(a)
	nb, errB := normalize(b)
	return errA == nil && errB == nil && reflect.DeepEqual(na, nb)
}

func normalize(v any) (any, error) {
	text, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return decodeJSON(string(text))
}
