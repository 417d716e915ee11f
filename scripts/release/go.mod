module github.com/dlock-dev/dlock/scripts/release

go 1.26.0

require (
	go.yaml.in/yaml/v3 v3.0.6
	golang.org/x/mod v0.42.0
)
