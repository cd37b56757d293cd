package sdk_test

import (
	"reflect"
	"testing"

	"github.com/wasm-operator/wasm-operator/plugins/go/sdk"
)

func TestLoggingIsCapturedNatively(t *testing.T) {
	sdk.TakeCaptured()
	sdk.Log.Info("scaling up", "jinghzhu", "web", "live", 2, "odd")
	sdk.Log.Error("boom")
	got := sdk.TakeCaptured()
	want := []sdk.LogRecord{
		{Level: sdk.LevelInfo, Message: "scaling up", Fields: []sdk.Field{{Key: "jinghzhu", Value: "web"}, {Key: "live", Value: "2"}, {Key: "odd", Value: "(MISSING)"}}},
		{Level: sdk.LevelError, Message: "boom", Fields: []sdk.Field{}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("captured %+v", got)
	}
	if len(sdk.TakeCaptured()) != 0 {
		t.Error("TakeCaptured does not clear")
	}
}

func TestCaptureKeepsTheNewestRecords(t *testing.T) {
	sdk.TakeCaptured()
	sdk.SetLogSink(func(sdk.Level, string, []sdk.Field) {})
	sdk.SetLogSink(nil)
	for i := range sdk.CaptureLimit + 5 {
		sdk.Log.Trace("x", "i", i)
	}
	got := sdk.TakeCaptured()
	if len(got) != sdk.CaptureLimit || got[0].Fields[0].Value != "5" || got[len(got)-1].Fields[0].Value != "10004" {
		t.Errorf("kept %d records, first %v", len(got), got[0].Fields)
	}
}

func TestLogSinkReceivesCalls(t *testing.T) {
	var levels []sdk.Level
	sdk.SetLogSink(func(l sdk.Level, msg string, fs []sdk.Field) { levels = append(levels, l) })
	defer sdk.SetLogSink(nil)
	sdk.TakeCaptured()
	sdk.Log.Trace("t")
	sdk.Log.Debug("d")
	sdk.Log.Info("i")
	sdk.Log.Warn("w")
	sdk.Log.Error("e")
	want := []sdk.Level{sdk.LevelTrace, sdk.LevelDebug, sdk.LevelInfo, sdk.LevelWarn, sdk.LevelError}
	if !reflect.DeepEqual(levels, want) || len(sdk.TakeCaptured()) != 0 {
		t.Errorf("sink got %v", levels)
	}
	if sdk.LevelWarn != 3 || sdk.LevelWarn.String() != "warn" {
		t.Error("levels are numbered as the WIT enum")
	}
}
