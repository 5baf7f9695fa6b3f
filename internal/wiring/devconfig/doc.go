// Package devconfig reads the scheduler device config (HAMi's
// device-config.yaml, a ConfigMap mounted as a file) for the node
// binaries, checks its nvidia.migProfileAllowlist against the node's
// hardware, and reloads it on a signal or when the file changes.
//
// One rule covers start and reload: a config is applied only when it
// parses ([capability.ParseDeviceConfig]: malformed YAML, a misspelt key,
// a malformed profile name, an unconverted knownMigGeometries are refused)
// and, on this node, no allowlist entry that matches a GPU resolves none
// of its profiles (every name unknown to the GPU: [Check]). A refused
// config is reported with a [*Error] naming the file and the cause; at
// start the binary stops, on reload the last good config stays in force.
// Profile names that some GPU does not resolve next to ones it does (an
// alias such as 7g.79gb next to 7g.80gb) are findings the component logs,
// not refusals.
//
// An empty path means no file: the built-in [capability.DefaultAllowlist],
// which the binaries do not [Check] (its findings are logged, as ever).
// A file without migProfileAllowlist gives the default allowlist too.
//
// [Watch] runs until its context is done and starts no goroutine.
package devconfig
