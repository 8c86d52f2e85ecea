"""The mutating admission webhook's decisions: parse an AdmissionReview (`review`), decide what a pod gets
(`admit`, pure), build the JSONPatch (`mutate`, `patch`), and the caches the decisions read (`caches`).
The HTTP route (POST /mutate) is app.http.webhook."""
