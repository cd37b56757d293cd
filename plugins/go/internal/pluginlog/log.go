// Package pluginlog is the structured logger of both Go SDKs: package sdk
// (contract 0.2) and package controller (contract 0.3) re-export its names,
// and each SDK's component package points the sink at its contract's host
// `log` import (the two WIT `level` enums are numbered alike). Without a
// sink (natively, in `go test`) lines go to stderr and into a capture
// buffer that tests read. A plugin links one SDK, so the sink and the
// buffer are one per process.
package pluginlog

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Level is the severity of a log line, numbered as the WIT `level` enum.
type Level uint8

// The log levels.
const (
	LevelTrace Level = iota
	LevelDebug
	LevelInfo
	LevelWarn
	LevelError
)

var levelNames = [...]string{"trace", "debug", "info", "warn", "error"}

// String is the level in lower case, e.g. "info".
func (l Level) String() string {
	if int(l) < len(levelNames) {
		return levelNames[l]
	}
	return "level(" + strconv.Itoa(int(l)) + ")"
}

// Field is one structured field of a log line.
type Field struct {
	// Key names the field.
	Key string
	// Value is the field's value as text.
	Value string
}

// LogRecord is one log call kept by the native capture buffer.
type LogRecord struct {
	// Level is the call's severity.
	Level Level
	// Message is the call's message.
	Message string
	// Fields are the call's structured fields, in order.
	Fields []Field
}

// CaptureLimit is how many records the native capture buffer keeps (the
// newest ones).
const CaptureLimit = 10000

var (
	logMu    sync.Mutex
	logSink  func(level Level, message string, fields []Field)
	captured []LogRecord // a ring of at most CaptureLimit records
	oldest   int         // index of the oldest record once the ring is full
)

// SetLogSink sends every log call to sink (the component installs the
// host's `log` import here); nil restores the native stderr and capture.
func SetLogSink(sink func(level Level, message string, fields []Field)) {
	logMu.Lock()
	defer logMu.Unlock()
	logSink = sink
}

// TakeCaptured returns and clears the records logged natively so far.
func TakeCaptured() []LogRecord {
	logMu.Lock()
	defer logMu.Unlock()
	out := append(captured[oldest:len(captured):len(captured)], captured[:oldest]...)
	captured, oldest = nil, 0
	return out
}

// Logger writes structured log lines, logr style: a message then
// alternating keys and values (values formatted with fmt.Sprint; a
// trailing key without a value gets "(MISSING)").
type Logger struct{}

// Trace writes a trace line.
func (Logger) Trace(msg string, keysAndValues ...any) { write(LevelTrace, msg, keysAndValues) }

// Debug writes a debug line.
func (Logger) Debug(msg string, keysAndValues ...any) { write(LevelDebug, msg, keysAndValues) }

// Info writes an info line.
func (Logger) Info(msg string, keysAndValues ...any) { write(LevelInfo, msg, keysAndValues) }

// Warn writes a warn line.
func (Logger) Warn(msg string, keysAndValues ...any) { write(LevelWarn, msg, keysAndValues) }

// Error writes an error line.
func (Logger) Error(msg string, keysAndValues ...any) { write(LevelError, msg, keysAndValues) }

// fields pairs up alternating keys and values.
func fields(keysAndValues []any) []Field {
	out := make([]Field, 0, (len(keysAndValues)+1)/2)
	for i := 0; i < len(keysAndValues); i += 2 {
		f := Field{Key: fmt.Sprint(keysAndValues[i]), Value: "(MISSING)"}
		if i+1 < len(keysAndValues) {
			f.Value = fmt.Sprint(keysAndValues[i+1])
		}
		out = append(out, f)
	}
	return out
}

func write(level Level, msg string, keysAndValues []any) {
	fs := fields(keysAndValues)
	logMu.Lock()
	sink := logSink
	logMu.Unlock()
	if sink != nil {
		sink(level, msg, fs)
		return
	}
	fmt.Fprintln(os.Stderr, formatLine(level, msg, fs))
	capture(LogRecord{Level: level, Message: msg, Fields: fs})
}

// formatLine is `[plugin info] message k="v"`.
func formatLine(level Level, msg string, fs []Field) string {
	var sb strings.Builder
	sb.WriteString("[plugin " + level.String() + "] " + msg)
	for _, f := range fs {
		sb.WriteString(" " + f.Key + "=" + strconv.Quote(f.Value))
	}
	return sb.String()
}

func capture(r LogRecord) {
	logMu.Lock()
	defer logMu.Unlock()
	if len(captured) < CaptureLimit {
		captured = append(captured, r)
		return
	}
	captured[oldest] = r
	oldest = (oldest + 1) % CaptureLimit
}
