package sdk

import "github.com/wasm-operator/wasm-operator/plugins/go/internal/pluginlog"

// The logger's names, from the logger both Go SDKs share
// (internal/pluginlog, whose doc comments say more).
type (
	// Level is the severity of a log line, numbered as the WIT `level` enum.
	Level = pluginlog.Level
	// Field is one structured field of a log line.
	Field = pluginlog.Field
	// LogRecord is one log call kept by the native capture buffer.
	LogRecord = pluginlog.LogRecord
	// Logger writes structured log lines, logr style: a message then
	// alternating keys and values (values formatted with fmt.Sprint; a
	// trailing key without a value gets "(MISSING)").
	Logger = pluginlog.Logger
)

// The log levels.
const (
	LevelTrace = pluginlog.LevelTrace
	LevelDebug = pluginlog.LevelDebug
	LevelInfo  = pluginlog.LevelInfo
	LevelWarn  = pluginlog.LevelWarn
	LevelError = pluginlog.LevelError
)

// CaptureLimit is how many records the native capture buffer keeps (the
// newest ones).
const CaptureLimit = pluginlog.CaptureLimit

// Log is the SDK's logger.
var Log Logger

// SetLogSink sends every log call to sink (the component installs the
// host's `log` import here); nil restores the native stderr and capture.
func SetLogSink(sink func(level Level, message string, fields []Field)) {
	pluginlog.SetLogSink(sink)
}

// TakeCaptured returns and clears the records logged natively so far.
func TakeCaptured() []LogRecord { return pluginlog.TakeCaptured() }
