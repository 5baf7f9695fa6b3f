# file: deviceplugin/plugin.go
# guard: an intact checkpoint is read at start (mutant: emptied, its pods and devices dropped)
s/^\tckpt, exists, err := ReadCheckpoint(path)$/\tckpt, exists, err := ReadCheckpoint(path)\n\tckpt = Checkpoint{BootID: ckpt.BootID}/
