# file: realize/reconcile.go
# guard: reconcile retains an active owner's instance its record no longer names
s/^\t\tif want\.active\[r\.Owner\.PodUID\] {$/\t\tif false \&\& want.active[r.Owner.PodUID] {/
