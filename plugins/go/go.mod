module github.com/wasm-operator/wasm-operator/plugins/go

go 1.26

require go.bytecodealliance.org/pkg v0.4.0

require gopkg.in/yaml.v3 v3.0.1

// The Go module proxy does not serve go.bytecodealliance.org/pkg: toolchain.sh
// takes it from the wit-bindgen-go crate into the cache and links it here.
replace go.bytecodealliance.org/pkg => ./.wit-go-runtime
