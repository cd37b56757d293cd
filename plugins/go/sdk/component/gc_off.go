//go:build wasip1 && !jinghzhu_gc

package component

// collectorOn is false in every build but the languages test's
// `jinghzhu_gc` one, which shows why the collector is off.
const collectorOn = false
