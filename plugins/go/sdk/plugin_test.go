package sdk_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/wasm-operator/wasm-operator/plugins/go/sdk"
	"github.com/wasm-operator/wasm-operator/plugins/go/sdk/sdktest"
)

func callWith(f sdk.ReconcileFunc) (string, bool, bool) {
	raw := sdktest.NewInput(sdktest.Jinghzhu("w", "d", 1)).Build()
	_, err := sdk.Call(f, &raw)
	if err == nil {
		return "", false, false
	}
	return err.Message, err.Retryable, true
}

func TestCallTurnsAPanicIntoARetryableError(t *testing.T) {
	msg, retry, failed := callWith(func(sdk.Context, sdk.Input) (sdk.Output, error) {
		var m map[string]int
		m["x"] = 1
		return sdk.Output{}, nil
	})
	if !failed || !retry || !strings.HasPrefix(msg, "panic: assignment to entry in nil map") {
		t.Errorf("got %q retryable=%v", msg, retry)
	}
}

func TestCallTurnsAPlainErrorIntoARetryableError(t *testing.T) {
	msg, retry, failed := callWith(func(sdk.Context, sdk.Input) (sdk.Output, error) {
		return sdk.Output{}, errors.New("api down")
	})
	if !failed || !retry || msg != "api down" {
		t.Errorf("got %q retryable=%v", msg, retry)
	}
}

func TestCallPassesAFatalErrorThrough(t *testing.T) {
	msg, retry, failed := callWith(func(sdk.Context, sdk.Input) (sdk.Output, error) {
		return sdk.Output{}, fmt.Errorf("wrapped: %w", sdk.Fatal("bad spec"))
	})
	if !failed || retry || msg != "bad spec" {
		t.Errorf("got %q retryable=%v", msg, retry)
	}
	_, retry, _ = callWith(func(sdk.Context, sdk.Input) (sdk.Output, error) {
		return sdk.Output{}, sdk.Retryable("later")
	})
	if !retry {
		t.Error("Retryable is retryable")
	}
}

func TestCallRejectsABrokenInputAsFatal(t *testing.T) {
	raw := sdktest.NewInput(sdktest.Jinghzhu("w", "d", 1)).Build()
	raw.Jinghzhu.Metadata.Name = 1000
	_, err := sdk.Call(func(sdk.Context, sdk.Input) (sdk.Output, error) { return sdk.Output{}, nil }, &raw)
	if err == nil || err.Retryable || !strings.Contains(err.Message, "jinghzhu.metadata.name") {
		t.Errorf("err = %+v", err)
	}
}

func TestCallEncodesTheOutputAndPassesNow(t *testing.T) {
	raw := sdktest.NewInput(sdktest.Jinghzhu("w", "d", 1)).Now(42).Build()
	wire, err := sdk.Call(func(ctx sdk.Context, in sdk.Input) (sdk.Output, error) {
		return sdk.Output{DeletePods: []string{fmt.Sprint(ctx.Now.Seconds), in.Jinghzhu.Name()}}, nil
	}, &raw)
	if err != nil {
		t.Fatal(err)
	}
	out, derr := sdk.DecodeOutput(&wire)
	if derr != nil || len(out.DeletePods) != 2 || out.DeletePods[0] != "42" || out.DeletePods[1] != "w" {
		t.Errorf("out = %+v, %v", out, derr)
	}
}
