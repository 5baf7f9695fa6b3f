# file: realize/reconcile.go
# guard: reconcile spares instances of pods whose listing is too young (AbsentPodGrace)
s/^\t\tif m\.young(want, r) {$/\t\tif false \&\& m.young(want, r) {/
