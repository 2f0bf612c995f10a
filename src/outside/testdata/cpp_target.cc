// A C++ target for the outside capture: strings in a map, a list of unique_ptr nodes, a thread
// holding a vector of its own (another arena), and a freed vector. Prints "live ADDR SIZE"
// (malloc_usable_size) per block it holds, "freed ADDR" per block it gave back, then "ready",
// and exits 0 on a line on stdin.
#include <malloc.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

struct Node {
  std::unique_ptr<Node> next;
  long value[3];
};

static void live(const void *p) { std::printf("live %lx %zu\n", (unsigned long)p, malloc_usable_size((void *)p)); }

int main() {
  std::mutex mu;
  std::condition_variable cv;
  bool made = false, quit = false;
  std::vector<std::string> *theirs = nullptr;
  std::thread worker([&] {
    auto mine = new std::vector<std::string>;
    for (int i = 0; i < 20; i++) mine->push_back(std::string(50 + i, 'w'));
    std::unique_lock<std::mutex> lock(mu);
    theirs = mine;
    made = true;
    cv.notify_all();
    cv.wait(lock, [&] { return quit; });
    delete mine;
  });
  auto names = new std::map<int, std::string>;
  for (int i = 0; i < 100; i++) (*names)[i] = std::string(40 + i, 'x');
  std::unique_ptr<Node> head;
  for (int i = 0; i < 50; i++) {
    auto n = std::make_unique<Node>();
    n->next = std::move(head);
    head = std::move(n);
  }
  // 800 bytes: a tcache size nothing else here asks for, so the chunk stays free.
  auto doomed = new std::vector<long>(100);
  const void *doomed_data = doomed->data();
  delete doomed;
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return made; });
  }
  for (auto &kv : *names) live(kv.second.data());
  for (Node *n = head.get(); n; n = n->next.get()) live(n);
  live(names);
  for (auto &s : *theirs) live(s.data());
  live(theirs->data());
  std::printf("freed %lx\n", (unsigned long)doomed_data);
  std::printf("ready\n");
  std::fflush(stdout);
  char c;
  ssize_t got = read(0, &c, 1);
  {
    std::lock_guard<std::mutex> lock(mu);
    quit = true;
  }
  cv.notify_all();
  worker.join();
  delete names;
  return got < 0;
}
