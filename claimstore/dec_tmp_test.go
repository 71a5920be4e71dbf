package claimstore
import "testing"
func BenchmarkDecodeRecordTmp(b *testing.B) {
	seat, _ := SeatKey("s", "p", "w")
	data := []byte(`{"version":1,"kind":"writer-claim","claimId":"c40209e880c0c7e2340ca0a3c","bindingId":"b<1>","pins":{"a":1},"host":{"machineId":"0123456789abcdef0123456789abcdef","bootId":"11111111-2222-3333-4444-555555555555"},"owner":{"pid":4266,"start":"113520","boot":"11111111-2222-3333-4444-555555555555","incarnation":1},"unitName":"mosaic-chat-c40209e880c0c7e2340ca0a3c","spawnMarker":"m-1","invocationId":"inv","engine":null,"shim":null,"generation":2,"state":"stopped","proof":{"kind":"cohortProof","ref":"cohort-1"},"stop":null,"prior":null,"execution":null,"cohortRef":null,"key":{"kind":"seat","seat":"s","project":"p","workspace":"w"},"revision":3,"writtenAt":"2024-05-06T07:08:09.010Z"}` + "\n")
	for b.Loop() {
		if _, err := DecodeRecord(data, seat, 3); err != nil { b.Fatal(err) }
	}
}
