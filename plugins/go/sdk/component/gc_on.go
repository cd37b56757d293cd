//go:build wasip1 && jinghzhu_gc

package component

// collectorOn: this build (tag `jinghzhu_gc`) leaves the collector on, to
// show the trap it causes; never ship it.
const collectorOn = true
