/* hold-env: the images' entrypoint, before any dynamically linked program runs. Built static
 * (install-epstack.sh), so no loader reads LD_PRELOAD, LD_AUDIT or LD_LIBRARY_PATH before it.
 *
 *   hold-env PROGRAM [ARG...]             run PROGRAM (a path) with the refused variables held
 *   hold-env --restore COMMAND [ARG...]   run COMMAND (searched on PATH) with them given back
 *
 * HELD_FILE (written by `epstack image guard --record`, epstack.guard.environment) lists the variables the
 * guard refuses, NUL-terminated: NAME=value where the build set it, NAME where it did not, a prefix
 * ending in '*' for every variable so named. Each variable listed whose value is not the build's is
 * held: the build's value (or none) stays, the given one goes to EPSTACK_HELD_<NAME> as "+value", or
 * "-" where it was unset. The entrypoint's shell and the guard then run as built, and the guard names
 * what was held. --restore puts the given values back. Without HELD_FILE (no build record), nothing
 * is held. This program checks nothing: the guard judges.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef HELD_FILE
#error "build with -DHELD_FILE='\"/path/to/held-variables\"'"
#endif
#define HELD "EPSTACK_HELD_"

extern char **environ;

static char *listing;  /* HELD_FILE's entries */
static size_t listing_size;

static void fail(const char *what, const char *path) {
  fprintf(stderr, "hold-env: %s %s: %s\n", what, path, strerror(errno));
  exit(127);
}

/* HELD_FILE into `listing`; 0 when there is none. */
static int read_listing(void) {
  int fd = open(HELD_FILE, O_RDONLY | O_CLOEXEC);
  struct stat info;
  if (fd < 0) {
    if (errno == ENOENT) return 0;
    fail("cannot open", HELD_FILE);
  }
  if (fstat(fd, &info) != 0) fail("cannot stat", HELD_FILE);
  listing = malloc((size_t)info.st_size + 1);
  if (listing == NULL) fail("no memory for", HELD_FILE);
  while (listing_size < (size_t)info.st_size) {
    ssize_t got = read(fd, listing + listing_size, (size_t)info.st_size - listing_size);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) fail("cannot read", HELD_FILE);
    listing_size += (size_t)got;
  }
  listing[listing_size] = '\0';  /* a last entry without its NUL still ends */
  close(fd);
  return 1;
}

static size_t name_length(const char *entry) {
  const char *equals = strchr(entry, '=');
  return equals != NULL ? (size_t)(equals - entry) : strlen(entry);
}

#define EACH_LISTED(e) for (const char *e = listing; e < listing + listing_size; e += strlen(e) + 1)

/* The environment entry NAME=value names a variable the listing holds. */
static int is_listed(const char *entry) {
  size_t name = name_length(entry);
  EACH_LISTED(e) {
    size_t n = name_length(e);
    int prefix = n > 0 && e[n - 1] == '*' && e[n] == '\0';
    if (prefix ? name >= n - 1 && strncmp(e, entry, n - 1) == 0 : n == name && strncmp(e, entry, n) == 0)
      return 1;
  }
  return 0;
}

/* The entry is the build's own NAME=value. */
static int is_built(const char *entry) {
  EACH_LISTED(e) {
    if (strchr(e, '=') != NULL && strcmp(e, entry) == 0) return 1;
  }
  return 0;
}

/* The entry names the same variable as NAME=value `other`. */
static int same_name(const char *entry, const char *other) {
  size_t n = name_length(other);
  return name_length(entry) == n && strncmp(entry, other, n) == 0;
}

static char *held_entry(const char *entry) {
  size_t name = name_length(entry);
  const char *value = entry[name] == '=' ? entry + name + 1 : NULL;
  size_t size = strlen(HELD) + name + 3 + (value != NULL ? strlen(value) : 0);
  char *out = malloc(size);
  if (out == NULL) fail("no memory for", entry);
  snprintf(out, size, "%s%.*s=%s%s", HELD, (int)name, entry, value != NULL ? "+" : "-", value ? value : "");
  return out;
}

static char **hold(void) {
  size_t count = 0, kept = 0;
  while (environ[count] != NULL) count++;
  char **out = calloc(count + 2 * listing_size + 1, sizeof *out);
  if (out == NULL) fail("no memory for", "the environment");
  for (size_t i = 0; i < count; i++) {
    const char *entry = environ[i];
    if (strncmp(entry, HELD, strlen(HELD)) != 0 && is_listed(entry) && !is_built(entry))
      out[kept++] = held_entry(entry);
    else
      out[kept++] = (char *)entry;
  }
  EACH_LISTED(built) {  /* the build's value of each variable held or unset */
    if (strchr(built, '=') == NULL) continue;
    int given = 0, present = 0;
    for (size_t i = 0; i < count; i++) given |= same_name(environ[i], built);
    for (size_t i = 0; i < kept; i++) present |= same_name(out[i], built);
    if (!given) {
      char name[4096];
      snprintf(name, sizeof name, "%.*s", (int)name_length(built), built);
      out[kept++] = held_entry(name);
    }
    if (!present || !given) out[kept++] = (char *)built;
  }
  return out;
}

static char **restore(void) {
  size_t count = 0, kept = 0;
  while (environ[count] != NULL) count++;
  char **out = calloc(count + 1, sizeof *out);
  if (out == NULL) fail("no memory for", "the environment");
  for (size_t i = 0; i < count; i++) {
    const char *entry = environ[i];
    int held = 0;
    for (size_t j = 0; j < count && !held; j++) {
      const char *h = environ[j];
      held = strncmp(h, HELD, strlen(HELD)) == 0 && same_name(entry, h + strlen(HELD));
    }
    if (strncmp(entry, HELD, strlen(HELD)) != 0 && !held) out[kept++] = (char *)entry;
  }
  for (size_t i = 0; i < count; i++) {
    const char *h = environ[i];
    size_t name = name_length(h);
    if (strncmp(h, HELD, strlen(HELD)) != 0 || h[name] != '=' || h[name + 1] != '+') continue;
    size_t size = strlen(h) - strlen(HELD);
    char *entry = malloc(size);
    if (entry == NULL) fail("no memory for", h);
    snprintf(entry, size, "%.*s=%s", (int)(name - strlen(HELD)), h + strlen(HELD), h + name + 2);
    out[kept++] = entry;
  }
  return out;
}

int main(int argc, char **argv) {
  if (argc >= 3 && strcmp(argv[1], "--restore") == 0) {
    environ = restore();
    execvp(argv[2], argv + 2);
    fail("cannot run", argv[2]);
  }
  if (argc < 2 || argv[1][0] == '-') {
    fprintf(stderr, "usage: hold-env PROGRAM [ARG...] | hold-env --restore COMMAND [ARG...]\n");
    return 2;
  }
  if (read_listing()) environ = hold();
  execv(argv[1], argv + 1);
  fail("cannot run", argv[1]);
  return 127;
}
