module github.com/wasm-operator/wasm-operator/tests/plugins/misbehaving-go

go 1.26

require github.com/wasm-operator/wasm-operator/plugins/go v0.0.0

require go.bytecodealliance.org/pkg v0.4.0 // indirect

// The SDK from this repository, and the runtime package its toolchain
// links into plugins/go (plugins/go/toolchain.sh).
replace (
	github.com/wasm-operator/wasm-operator/plugins/go => ../../../plugins/go
	go.bytecodealliance.org/pkg => ../../../plugins/go/.wit-go-runtime
)
