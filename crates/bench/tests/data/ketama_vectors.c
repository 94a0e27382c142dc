/* Prints libmemcached's key -> server choices for the ketama test vectors in
 * crates/bench/src/ketama.rs (test `matches_libmemcached`).
 *
 *   apt-get install -y libmemcached-dev
 *   gcc ketama_vectors.c -o ketama_vectors -lmemcached && ./ketama_vectors
 */
#include <libmemcached/memcached.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  memcached_st *m = memcached_create(NULL);
  memcached_behavior_set(m, MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED, 1);
  memcached_server_add(m, "10.0.1.1", 11211);
  memcached_server_add(m, "10.0.1.2", 11211);
  memcached_server_add(m, "10.0.1.3", 11211);
  memcached_server_add(m, "127.0.0.1", 11311);
  const char *keys[] = {"a", "foo", "key0", "key1", "key2", "key3", "key4",
                        "key5", "key6", "key7", "k0000000000000000042", "hello world"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    size_t n = strlen(keys[i]);
    printf("(\"%s\", %u, 0x%08x),\n", keys[i], memcached_generate_hash(m, keys[i], n),
           memcached_generate_hash_value(keys[i], n, MEMCACHED_HASH_MD5));
  }
  int counts[4] = {0};
  char buf[64];
  for (int i = 0; i < 10000; i++) {
    int n = sprintf(buf, "key%d", i);
    counts[memcached_generate_hash(m, buf, n)]++;
  }
  printf("key0..key9999: %d %d %d %d\n", counts[0], counts[1], counts[2], counts[3]);
  memcached_free(m);
  return 0;
}
