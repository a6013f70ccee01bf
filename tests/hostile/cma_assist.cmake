actorpipe_add_test(NAME hostile_cma_assist_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/cma_assist_test.cc
  LIBS actorpipe_test_support TIMEOUT 120)
