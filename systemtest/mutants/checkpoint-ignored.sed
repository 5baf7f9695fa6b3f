# file: deviceplugin/plugin.go
# guard: an intact checkpoint is read at start (mutant: treated as lost)
s/^\tckpt, exists, err := ReadCheckpoint(path)$/\tckpt, exists, err := ReadCheckpoint(path)\n\tckpt, exists = Checkpoint{}, false/
