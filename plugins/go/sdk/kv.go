package sdk

import "sort"

// SortedKeys are the keys of m in code point (bytewise) order, the order
// the host sorts labels in.
func SortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Merge is a new map of base with overlay on top (overlay wins); nil when
// both are empty.
func Merge(base, overlay map[string]string) map[string]string {
	if len(base)+len(overlay) == 0 {
		return nil
	}
	out := make(map[string]string, len(base)+len(overlay))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range overlay {
		out[k] = v
	}
	return out
}
