#ifndef COPENSSL_SHIM_H
#define COPENSSL_SHIM_H
// Hide every API deprecated as of OpenSSL 3.0.
#define OPENSSL_API_COMPAT 30000
#define OPENSSL_NO_DEPRECATED 1
#include <openssl/evp.h>
#include <openssl/ec.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/crypto.h>
#include <openssl/core_names.h>
#include <openssl/param_build.h>
#include <openssl/x509.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

// Function-like macros are not imported by Swift; wrap the ones needed.
static inline long shim_BIO_get_mem_data(BIO *bio, char **pp) { return BIO_get_mem_data(bio, pp); }
static inline void shim_OPENSSL_free(void *p) { OPENSSL_free(p); }

/// Builds a P-256 EVP_PKEY from an uncompressed public point (65 bytes, 0x04||x||y) and, optionally,
/// a 32-byte private scalar. Returns NULL on any failure.
static inline EVP_PKEY *shim_p256_from_components(const unsigned char *pub, size_t pub_len,
                                                  const unsigned char *priv, size_t priv_len) {
    EVP_PKEY *pkey = NULL;
    BIGNUM *d = NULL;
    OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
    OSSL_PARAM *params = NULL;
    EVP_PKEY_CTX *ctx = NULL;
    if (!bld) goto done;
    if (!OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0)) goto done;
    if (!OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, pub, pub_len)) goto done;
    if (priv && priv_len > 0) {
        d = BN_bin2bn(priv, (int)priv_len, NULL);
        if (!d || !OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_PRIV_KEY, d)) goto done;
    }
    params = OSSL_PARAM_BLD_to_param(bld);
    if (!params) goto done;
    ctx = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
    if (!ctx || EVP_PKEY_fromdata_init(ctx) <= 0) goto done;
    if (EVP_PKEY_fromdata(ctx, &pkey, (priv && priv_len > 0) ? EVP_PKEY_KEYPAIR : EVP_PKEY_PUBLIC_KEY, params) <= 0) {
        pkey = NULL;
    }
done:
    EVP_PKEY_CTX_free(ctx);
    OSSL_PARAM_free(params);
    OSSL_PARAM_BLD_free(bld);
    BN_clear_free(d);
    return pkey;
}

/// Generates a fresh P-256 key pair, or NULL.
static inline EVP_PKEY *shim_p256_generate(void) {
    EVP_PKEY *key = NULL;
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_EC, NULL);
    if (!ctx) return NULL;
    if (EVP_PKEY_keygen_init(ctx) <= 0 || EVP_PKEY_CTX_set_ec_paramgen_curve_nid(ctx, NID_X9_62_prime256v1) <= 0 ||
        EVP_PKEY_keygen(ctx, &key) <= 0) {
        key = NULL;
    }
    EVP_PKEY_CTX_free(ctx);
    return key;
}

/// Converts a DER ECDSA signature to raw r||s (64 bytes). Returns 1 on success.
static inline int shim_ecdsa_der_to_raw(const unsigned char *der, long der_len, unsigned char *out64) {
    const unsigned char *p = der;
    ECDSA_SIG *sig = d2i_ECDSA_SIG(NULL, &p, der_len);
    if (!sig) return 0;
    const BIGNUM *r = NULL, *s = NULL;
    ECDSA_SIG_get0(sig, &r, &s);
    int ok = BN_bn2binpad(r, out64, 32) == 32 && BN_bn2binpad(s, out64 + 32, 32) == 32;
    ECDSA_SIG_free(sig);
    return ok;
}

/// Converts raw r||s (64 bytes) to DER. Returns the DER length (<= 72) written into out, or 0.
static inline int shim_ecdsa_raw_to_der(const unsigned char *raw64, unsigned char *out, int out_cap) {
    ECDSA_SIG *sig = ECDSA_SIG_new();
    if (!sig) return 0;
    BIGNUM *r = BN_bin2bn(raw64, 32, NULL), *s = BN_bin2bn(raw64 + 32, 32, NULL);
    if (!r || !s || !ECDSA_SIG_set0(sig, r, s)) { BN_free(r); BN_free(s); ECDSA_SIG_free(sig); return 0; }
    int len = i2d_ECDSA_SIG(sig, NULL);
    if (len <= 0 || len > out_cap) { ECDSA_SIG_free(sig); return 0; }
    unsigned char *p = out;
    len = i2d_ECDSA_SIG(sig, &p);
    ECDSA_SIG_free(sig);
    return len;
}
/// Generates an RSA key pair of `bits`, or NULL.
static inline EVP_PKEY *shim_rsa_generate(unsigned int bits) {
    EVP_PKEY *key = NULL;
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_RSA, NULL);
    if (!ctx) return NULL;
    if (EVP_PKEY_keygen_init(ctx) <= 0 || EVP_PKEY_CTX_set_rsa_keygen_bits(ctx, (int)bits) <= 0 ||
        EVP_PKEY_keygen(ctx, &key) <= 0) {
        key = NULL;
    }
    EVP_PKEY_CTX_free(ctx);
    return key;
}
/// TLS 1.2 at least: `SSL_CTX_set_min_proto_version` is a macro.
static inline int shim_SSL_CTX_require_tls12(SSL_CTX *ctx) {
    return (int)SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
}

/// SNI: `SSL_set_tlsext_host_name` is a macro.
static inline int shim_SSL_set_tlsext_host_name(SSL *ssl, const char *name) {
    return (int)SSL_set_tlsext_host_name(ssl, name);
}
#endif
