# file: deviceplugin/record.go
# guard: the recorded view (mutant: overlay leaves every record as it is)
s/^func (r \*nodeRecord) overlay(pod \*reservation\.Pod) {$/func (r *nodeRecord) overlay(pod *reservation.Pod) {\n\tif true {\n\t\treturn\n\t}/
