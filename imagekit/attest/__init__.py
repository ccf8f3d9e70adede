"""Evidence that travels with the digest: DSSE-signed in-toto statements (test-result,
promotion chain, CycloneDX SBOM) attached as OCI referrers, verified with a public key."""
