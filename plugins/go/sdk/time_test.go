package sdk_test

import (
	"testing"

	"github.com/wasm-operator/wasm-operator/plugins/go/sdk"
)

func TestParseRFC3339(t *testing.T) {
	cases := map[string]sdk.Timestamp{
		"2026-01-01T00:00:00Z":                {Seconds: 1767225600},
		" 2023-11-14T22:13:20.5Z\n":           {Seconds: 1700000000, Nanoseconds: 500000000},
		"2023-11-15T00:13:20+02:00":           {Seconds: 1700000000},
		"2023-11-14t20:13:20.123456789-02:00": {Seconds: 1700000000, Nanoseconds: 123456789},
		"2023-11-14T22:13:20.1234567891z":     {Seconds: 1700000000, Nanoseconds: 123456789},
		"1969-12-31T23:59:59Z":                {Seconds: -1},
	}
	for text, want := range cases {
		got, err := sdk.ParseRFC3339(text)
		if err != nil || got != want {
			t.Errorf("ParseRFC3339(%q) = %v, %v; want %v", text, got, err, want)
		}
	}
	for _, bad := range []string{"yesterday", "2026-01-01", "2026-01-01T00:00:00", "2026-01-01T00:00:00.Z", "2026-01-01T00:00:00+0100", "2026-01-01 00:00:00Z"} {
		if _, err := sdk.ParseRFC3339(bad); err == nil {
			t.Errorf("ParseRFC3339(%q) succeeded", bad)
		}
	}
}

func TestFormatRFC3339(t *testing.T) {
	cases := map[string]sdk.Timestamp{
		"2023-11-14T22:13:20.5Z":         {Seconds: 1700000000, Nanoseconds: 500000000},
		"2026-01-01T00:00:00Z":           {Seconds: 1767225600},
		"1970-01-01T00:00:00.000000001Z": {Nanoseconds: 1},
	}
	for want, ts := range cases {
		if got := sdk.FormatRFC3339(ts); got != want {
			t.Errorf("FormatRFC3339(%v) = %q, want %q", ts, got, want)
		}
	}
}

func TestCompareAndSecondsBetween(t *testing.T) {
	a, b := sdk.Timestamp{Seconds: 10, Nanoseconds: 5}, sdk.Timestamp{Seconds: 70}
	if sdk.CompareTimestamps(a, b) >= 0 || sdk.CompareTimestamps(b, a) <= 0 || sdk.CompareTimestamps(a, a) != 0 {
		t.Error("CompareTimestamps")
	}
	if sdk.CompareTimestamps(sdk.Timestamp{Seconds: 1, Nanoseconds: 2}, sdk.Timestamp{Seconds: 1, Nanoseconds: 1}) <= 0 {
		t.Error("nanoseconds break ties")
	}
	if got := sdk.SecondsBetween(sdk.Timestamp{Seconds: 10}, b); got != 60 {
		t.Errorf("SecondsBetween = %v", got)
	}
}
