module idemlab

go 1.26.0

require (
	github.com/google/go-cmdtest v0.4.0 // indirect
	github.com/google/go-cmp v0.3.1 // indirect
	github.com/google/renameio v0.1.0 // indirect
	github.com/santhosh-tekuri/jsonschema/v5 v5.3.1 // indirect
	golang.org/x/sync v0.25.0 // indirect
)
