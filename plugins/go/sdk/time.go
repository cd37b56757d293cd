package sdk

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// CompareTimestamps is negative, zero or positive as a is before, at or
// after b.
func CompareTimestamps(a, b Timestamp) int {
	switch {
	case a.Seconds < b.Seconds:
		return -1
	case a.Seconds > b.Seconds:
		return 1
	case a.Nanoseconds < b.Nanoseconds:
		return -1
	case a.Nanoseconds > b.Nanoseconds:
		return 1
	}
	return 0
}

// SecondsBetween is later - earlier in seconds.
func SecondsBetween(earlier, later Timestamp) float64 {
	return float64(later.Seconds-earlier.Seconds) + (float64(later.Nanoseconds)-float64(earlier.Nanoseconds))/1e9
}

// ParseRFC3339 reads `2026-01-01T00:00:00Z`, with an optional fraction
// (digits past nanoseconds are dropped) and a `Z` or `±hh:mm` offset;
// surrounding whitespace is ignored.
func ParseRFC3339(text string) (Timestamp, error) {
	s := strings.TrimSpace(text)
	if len(s) < 20 || !shape(s[:19], "dddd-dd-ddTdd:dd:dd") {
		return Timestamp{}, fmt.Errorf("not an RFC 3339 time: %q", s)
	}
	frac, rest := splitFraction(s[19:])
	offset, ok := parseOffset(rest)
	if !ok {
		return Timestamp{}, fmt.Errorf("not an RFC 3339 time: %q", s)
	}
	n := func(i, j int) int { v, _ := strconv.Atoi(s[i:j]); return v }
	t := time.Date(n(0, 4), time.Month(n(5, 7)), n(8, 10), n(11, 13), n(14, 16), n(17, 19), 0, time.UTC)
	return Timestamp{Seconds: t.Unix() - offset, Nanoseconds: frac}, nil
}

// shape reports that s matches pattern, where `d` is an ASCII digit, `T`
// is `T` or `t` and any other byte stands for itself.
func shape(s, pattern string) bool {
	for i := 0; i < len(pattern); i++ {
		c := s[i]
		switch pattern[i] {
		case 'd':
			if c < '0' || c > '9' {
				return false
			}
		case 'T':
			if c != 'T' && c != 't' {
				return false
			}
		default:
			if c != pattern[i] {
				return false
			}
		}
	}
	return true
}

// splitFraction reads an optional `.digits` (at least one digit) as
// nanoseconds and returns what follows it.
func splitFraction(s string) (uint32, string) {
	if len(s) < 2 || s[0] != '.' || !isDigit(s[1]) {
		return 0, s
	}
	i := 1
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	digits := (s[1:i] + "000000000")[:9]
	ns, _ := strconv.ParseUint(digits, 10, 32)
	return uint32(ns), s[i:]
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// parseOffset reads `Z`, `z` or `±hh:mm` as seconds east of UTC.
func parseOffset(s string) (int64, bool) {
	if s == "Z" || s == "z" {
		return 0, true
	}
	if len(s) != 6 || (s[0] != '+' && s[0] != '-') || !shape(s[1:], "dd:dd") {
		return 0, false
	}
	h, _ := strconv.Atoi(s[1:3])
	m, _ := strconv.Atoi(s[4:6])
	off := int64(h*3600 + m*60)
	if s[0] == '-' {
		off = -off
	}
	return off, true
}

// FormatRFC3339 is ts as `YYYY-MM-DDTHH:MM:SS[.fraction]Z` (the fraction
// without trailing zeros, absent when zero).
func FormatRFC3339(ts Timestamp) string {
	base := time.Unix(ts.Seconds, 0).UTC().Format("2006-01-02T15:04:05")
	if ts.Nanoseconds == 0 {
		return base + "Z"
	}
	frac := fmt.Sprintf("%09d", ts.Nanoseconds)
	return base + "." + strings.TrimRight(frac, "0") + "Z"
}
