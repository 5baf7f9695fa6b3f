# file: deviceplugin/record.go
# guard: the checkpoint's recorded hand-outs are applied to the pods' records (the recorded view; mutant: the view ignores them)
s/^\trecorded := r\.devicesOf(types\.UID(pod\.UID))$/\trecorded := r.devicesOf(types.UID(pod.UID))\n\trecorded = nil/
