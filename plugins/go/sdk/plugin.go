package sdk

import (
	"errors"
	"fmt"

	wit "github.com/wasm-operator/wasm-operator/plugins/go/bindings/imports/jinghzhu_operator_types"
)

// Context is what a reconcile gets besides its input: the input's clock
// (never read the system clock: a reconcile is a pure function of its
// input) and a logger.
type Context struct {
	// Now is the host's clock at the start of this reconcile.
	Now Timestamp
	// Log writes into the host's log, tagged with the plugin and object.
	Log Logger
}

// ReconcileFunc computes the actions that bring the cluster towards the
// spec. It must be a pure, idempotent function of its input. Return a
// *ReconcileError (Retryable, Fatal) to choose whether the host retries;
// any other error is retryable.
type ReconcileFunc func(ctx Context, in Input) (Output, error)

// Call runs f on a wire input and returns the wire result: an input that
// does not decode is a non-retryable error, a panic a retryable error
// `panic: <value>`, a *ReconcileError passes as is and any other error
// becomes a retryable one with its text.
func Call(f ReconcileFunc, raw *wit.ReconcileInput) (wit.ReconcileOutput, *wit.ReconcileError) {
	in, err := Decode(raw)
	if err != nil {
		return wit.ReconcileOutput{}, &wit.ReconcileError{
			Message:   "the plugin SDK could not read the host's input: " + err.Error(),
			Retryable: false,
		}
	}
	out, err := protect(f, in)
	if err != nil {
		return wit.ReconcileOutput{}, toWire(err)
	}
	return Encode(out), nil
}

// protect runs f, turning a panic into a retryable error.
func protect(f ReconcileFunc, in Input) (out Output, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = Output{}, Retryable(fmt.Sprintf("panic: %v", r))
		}
	}()
	return f(Context{Now: in.Now, Log: Log}, in)
}

// toWire is err as the WIT `reconcile-error`.
func toWire(err error) *wit.ReconcileError {
	var re *ReconcileError
	if errors.As(err, &re) && re != nil {
		return &wit.ReconcileError{Message: re.Message, Retryable: re.Retryable}
	}
	return &wit.ReconcileError{Message: err.Error(), Retryable: true}
}
