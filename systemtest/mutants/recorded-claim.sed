# file: deviceplugin/record.go
# guard: a pod's recorded devices win every conflict although its owner edited its record (recordedClaim)
s/^\tif onlyRecorded {$/\tif false \&\& onlyRecorded {/
